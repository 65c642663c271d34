"""Renders chat templates the way transformers does, for TemplateParityTest.

Reads one JSON object on stdin: {"templates": {name: source}, "conversations": [[{role, content}]],
"bos_token", "eos_token"}. Writes {"name|conversation|generation_prompt": text or "ERROR: ..."} on stdout.
The environment mirrors transformers' chat template compiler: sandboxed, trim_blocks, lstrip_blocks,
loop controls, a pass-through {% generation %} tag, raise_exception, strftime_now and its tojson.
"""
import datetime
import json
import sys

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise TemplateError(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    request = json.load(sys.stdin)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols", Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    out = {}
    for name, source in request["templates"].items():
        for index, conversation in enumerate(request["conversations"]):
            for generation_prompt in (False, True):
                key = f"{name}|{index}|{str(generation_prompt).lower()}"
                try:
                    out[key] = env.from_string(source).render(
                        messages=conversation, add_generation_prompt=generation_prompt,
                        bos_token=request["bos_token"], eos_token=request["eos_token"])
                except Exception as error:  # every failure is a verdict to compare, not a crash
                    out[key] = "ERROR: " + type(error).__name__
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
