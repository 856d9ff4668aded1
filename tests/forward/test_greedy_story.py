# Greedy generation of stories260K from BOS reproduces the known sample: `specd generate --temp 0`
# must emit exactly the reference's greedy tokens, and its text must start with the known story.
#
# Contract: specd generate -m MODEL -p "" -n N --temp 0 --json prints one JSON object with
# "prompt_tokens", "tokens" (generated ids), "text", "finish_reason", "timings".

import json

import fwdutil
from ref_llama import LlamaRef

N = 60
KNOWN = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."


def main():
    ck = fwdutil.Checker("test_greedy_story")
    path = fwdutil.model_path("stories260K.gguf")
    ref = LlamaRef(path)
    want = ref.greedy([ref.bos], N)
    ck.check(ref.decode(want).strip().startswith(KNOWN), "reference greedy text is the known story")

    cp = fwdutil.run(["generate", "-m", path, "-p", "", "-n", N, "--temp", 0, "--json"])
    try:
        js = json.loads(cp.stdout)
    except ValueError as e:
        ck.check(False, "generate --json printed one JSON object (%s); stdout: %r" % (e, cp.stdout[:500]))
        ck.done()
    ck.check(js.get("prompt_tokens") == [ref.bos], "prompt_tokens == [BOS] (got %r)" % js.get("prompt_tokens"))
    got = js.get("tokens")
    first_diff = next((i for i, (a, b) in enumerate(zip(got or [], want)) if a != b), None)
    ck.check(got == want, "generated tokens equal the reference's greedy tokens (%d vs %d tokens%s)"
             % (len(got or []), len(want),
                "" if first_diff is None else ", first difference at %d: got %d want %d"
                % (first_diff, got[first_diff], want[first_diff])))
    text = js.get("text", "")
    ck.check(text.lstrip().startswith(KNOWN), "text starts with the known story: %r" % text[:120])
    ck.check(js.get("finish_reason") == "length", "finish_reason == length (got %r)" % js.get("finish_reason"))
    tm = js.get("timings", {})
    ck.check(all(k in tm for k in ("prefill_ms", "decode_ms", "prefill_tok_s", "decode_tok_s")),
             "timings has prefill/decode ms and tok/s: %r" % tm)
    ck.done()


if __name__ == "__main__":
    main()
