# test_sdk_tools.py — the official OpenAI Node client's tool loop (issue 39
# item 2) against a model FILE that carries a real chat template
# (`specd mkmodel --chat-template`: a model with the stories260K vocabulary and
# Qwen2.5's template, Hermes <tool_call> format, found by the server from the
# file as any instruct model's is): a required call with finish_reason
# "tool_calls" whose arguments zod validates, the tool result sent back as
# role "tool" and a final text answer, a named tool_choice, and a streamed
# call read with the client.
import json
import os
import shutil
import subprocess
import tempfile

from specd_e2e import Server, check, main, paths

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TEMPLATE = os.path.join(os.environ.get("SPECD_MODELS", "../shared/models"), "..", "reference", "chat-templates",
                        "Qwen-Qwen2.5-7B-Instruct.jinja")


def run():
    specd, target, _ = paths()
    node = shutil.which("node")
    check(node and os.path.exists(os.path.join(ROOT, "node_modules", "openai")), "node and npm's openai are needed (npm ci)")
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "qwen-template.gguf")
        r = subprocess.run([specd, "mkmodel", "-o", model, "--tokenizer", target, "--chat-template", TEMPLATE,
                            "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ff", "128",
                            "--ctx", "2048", "--seed", "9"], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, "mkmodel --chat-template: %s" % r.stderr[-500:])
        with Server(extra=["-m", model]) as srv:
            with open(srv.err_path) as f:
                pass
            st, _, b = srv.http("POST", "/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
            check(st == 200 and "<|im_start|>user" in json.loads(b)["prompt"], "the file's template is not used: %r" % b[:200])
            r = subprocess.run([node, os.path.join(HERE, "sdk_tools.mjs"), srv.base], capture_output=True, text=True,
                               timeout=300, cwd=ROOT)
            check(r.returncode == 0, "sdk_tools.mjs failed: %s" % r.stderr[-1500:])
            o = json.loads(r.stdout.strip().splitlines()[-1])
            print(json.dumps(o)[:600])
            check(o["finish1"] == "tool_calls" and o["calls"] and o["args_ok"], "required call: %r" % o)
            check(o["finish2"] in ("stop", "length") and isinstance(o["final"], str) and o["final_calls"] == 0,
                  "final answer after the tool result: %r" % o)
            check(o["named"] and all(n == "search" for n in o["named"]), "named tool_choice called %r" % o["named"])
            check(o["stream_finish"] == "tool_calls" and o["stream_calls"], "streamed call: %r" % o)


if __name__ == "__main__":
    main(run)
