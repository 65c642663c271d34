package dev.finetune.trainers.text;

import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.lib.tag.Tag;
import com.hubspot.jinjava.tree.Node;
import com.hubspot.jinjava.tree.TagNode;

/**
 * transformers' {@code {% generation %}…{% endgeneration %}}: marks assistant text for its own masking and renders
 * the body unchanged. We find message spans ourselves, so only the rendering matters here.
 */
final class GenerationTag implements Tag {
    private static final long serialVersionUID = 1L;

    @Override
    public String getName() {
        return "generation";
    }

    @Override
    public String getEndTagName() {
        return "endgeneration";
    }

    @Override
    public String interpret(TagNode tagNode, JinjavaInterpreter interpreter) {
        StringBuilder out = new StringBuilder();
        for (Node child : tagNode.getChildren()) {
            out.append(child.render(interpreter).getValue());
        }
        return out.toString();
    }
}
