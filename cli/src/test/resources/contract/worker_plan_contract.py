"""The Python half of the worker-plan contract test (WorkerPlanContractTest runs it with the project's venv).

    python worker_plan_contract.py PYTHON_SOURCE_DIR SCHEMA PLANS_DIR

1. finetune_worker/plan.py's dataclasses have exactly the schema's properties, with the schema's types and
   nullability, section by section.
2. Every plan the Java writer made (PLANS_DIR/*.json) loads, and writes back the same document.
3. A missing or unknown key, a value of the wrong type and another format are refused, naming the key.
"""

import copy
import dataclasses
import glob
import json
import os
import sys
import typing

source, schema_path, plans_dir = sys.argv[1:4]
sys.path.insert(0, source)
from finetune_worker import plan as plans  # noqa: E402

PRIMITIVES = {int: "integer", float: "number", bool: "boolean", str: "string"}


def types_of(schema):
    if "type" in schema:
        kinds = schema["type"]
        return set([kinds] if isinstance(kinds, str) else kinds)
    values = schema.get("enum", [schema.get("const")])
    return {"string"} if all(isinstance(v, str) for v in values) else {"?"}


def compare(schema, hint, path, problems):
    kinds = types_of(schema)
    if typing.get_origin(hint) is typing.Union:
        hint = [a for a in typing.get_args(hint) if a is not type(None)][0]
        if "null" not in kinds:
            problems.append("%s: Optional in plan.py, not nullable in the schema" % path)
        kinds = kinds - {"null"}
    elif "null" in kinds:
        problems.append("%s: nullable in the schema, not Optional in plan.py" % path)
    if dataclasses.is_dataclass(hint):
        if kinds != {"object"}:
            problems.append("%s: %s in plan.py, %s in the schema" % (path, hint.__name__, sorted(kinds)))
            return
        fields = typing.get_type_hints(hint)
        properties = schema.get("properties", {})
        if set(fields) != set(properties):
            problems.append("%s: plan.py has %s, the schema %s" % (path, sorted(set(fields) - set(properties)),
                                                                    sorted(set(properties) - set(fields))))
        if set(schema.get("required", [])) != set(properties) or schema.get("additionalProperties") is not False:
            problems.append("%s: the schema must require every property and allow no other" % path)
        for name in sorted(set(fields) & set(properties)):
            compare(properties[name], fields[name], path + "." + name, problems)
    elif typing.get_origin(hint) is tuple:
        if kinds != {"array"}:
            problems.append("%s: a tuple in plan.py, %s in the schema" % (path, sorted(kinds)))
            return
        compare(schema["items"], typing.get_args(hint)[0], path + "[]", problems)
    elif PRIMITIVES.get(hint) not in kinds or len(kinds) != 1:
        problems.append("%s: %s in plan.py, %s in the schema" % (path, hint.__name__, sorted(kinds)))


def refused(document, expected):
    try:
        plans.parse(document)
    except plans.PlanError as error:
        if expected not in str(error):
            raise AssertionError("refused with %r, expected %r" % (str(error), expected))
        return
    raise AssertionError("accepted a plan that should be refused (%s)" % expected)


def main():
    with open(schema_path) as f:
        schema = json.load(f)
    problems = []
    compare(schema, plans.Plan, "plan", problems)
    if schema["properties"]["format"].get("const") != plans.FORMAT:
        problems.append("plan.format: the schema says %r, plan.py %r" % (schema["properties"]["format"], plans.FORMAT))
    if problems:
        raise SystemExit("plan.py and the schema disagree:\n  " + "\n  ".join(problems))

    files = sorted(glob.glob(os.path.join(plans_dir, "*.json")))
    if not files:
        raise SystemExit("no plans in " + plans_dir)
    for path in files:
        with open(path) as f:
            document = json.load(f)
        loaded = plans.parse(document)
        if json.loads(plans.to_json(loaded)) != document:
            raise SystemExit("%s does not survive a load and a write" % path)

    with open(files[0]) as f:
        good = json.load(f)
    extra = copy.deepcopy(good)
    extra["learning_rate"] = 1e-3
    refused(extra, "plan: unknown 'learning_rate'")
    nested = copy.deepcopy(good)
    nested["model"]["dtype"] = "fp16"
    refused(nested, "plan.model: unknown 'dtype'")
    missing = copy.deepcopy(good)
    del missing["training"]["seed"]
    refused(missing, "plan.training: missing 'seed'")
    wrong_type = copy.deepcopy(good)
    wrong_type["training"]["total_steps"] = "10"
    refused(wrong_type, "plan.training.total_steps: expected an integer")
    old = copy.deepcopy(good)
    old["format"] = "finetune-worker-plan-1"
    refused(old, "this worker reads 'finetune-worker-plan-2'")
    mismatched = copy.deepcopy(good)
    mismatched["objective"]["kind"] = "dpo" if good["objective"]["kind"] != "dpo" else "sft"
    refused(mismatched, "set exactly when kind is")
    print("contract: plan.py matches the schema; %d Java-written plans load and write back unchanged; "
          "6 bad plans refused" % len(files))


main()
