# test_tokenize_cli.py — `specd tokenize` / `specd detokenize` end to end:
# llama-spm vector lines, round trips, --pieces, --splits, error exits, and
# agreement with the independent Python SPM encoder (spm_ref.py) on real text.
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spm_ref import SpmRef  # noqa: E402

SPECD = os.environ.get('SPECD', '')
MODELS = os.environ.get('SPECD_MODELS', '')
failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print('CHECK failed:', what, file=sys.stderr)


def run(args, stdin=b''):
    return subprocess.run([SPECD] + args, input=stdin, capture_output=True, timeout=60)


def ids_of(out):
    return [int(x) for x in out.split()]


def main():
    if not SPECD or not os.access(SPECD, os.X_OK):
        print('SKIP: specd binary not found ($SPECD=%r)' % SPECD, file=sys.stderr)
        return 77
    spm = os.path.join(MODELS, 'tokenizer-vectors', 'ggml-vocab-llama-spm.gguf')
    stories = os.path.join(MODELS, 'stories260K.gguf')
    if not os.path.exists(spm) or not os.path.exists(stories):
        print('SKIP: shared models missing under %r' % MODELS, file=sys.stderr)
        return 77

    # vector strings: .inp split on "\n__ggml_vocab_test__\n", .out one line each
    raw = open(spm + '.inp', 'rb').read()
    strings = raw.split(b'\n__ggml_vocab_test__\n')
    check(strings[-1] == b'', '.inp ends with a separator')
    strings = strings[:-1]
    want = open(spm + '.out', 'rb').read().decode().split('\n')
    check(len(want) >= len(strings) == 46, '46 vectors')
    for i in (0, 1, 4, 7, 9, 13, 18, 23, 26, 45):  # ascii, umlaut, spaces, tab, newlines, emoji, mixed
        s = strings[i]
        r = run(['tokenize', '-m', spm, '--no-bos'], s)
        check(r.returncode == 0, 'tokenize vector %d rc=%d %s' % (i, r.returncode, r.stderr))
        got = ids_of(r.stdout)
        check(got == ids_of(want[i]), 'vector %d: got %s want %s' % (i, got, want[i]))
        r2 = run(['detokenize', '-m', spm], r.stdout)
        check(r2.returncode == 0 and r2.stdout == s, 'vector %d: detokenize gives %r, want %r' % (i, r2.stdout, s))
        # with BOS (the vocabulary's add_bos_token is true)
        r3 = run(['tokenize', '-m', spm], s)
        check(ids_of(r3.stdout) == [1] + got, 'vector %d with BOS' % i)
    # -p instead of stdin, and the ids on a single line
    r = run(['tokenize', '-m', spm, '--no-bos', '-p', 'Hello world'])
    check(r.stdout == b'15043 3186\n', '-p Hello world: %r' % r.stdout)
    # byte-level BPE (gpt2): no BOS by default, round trip through detokenize
    gpt2 = os.path.join(MODELS, 'tokenizer-vectors', 'ggml-vocab-gpt-2.gguf')
    r = run(['tokenize', '-m', gpt2, '-p', 'Hello world'])
    check(r.stdout == b'15496 995\n', 'gpt2 -p Hello world: %r %r' % (r.stdout, r.stderr))
    r = run(['detokenize', '-m', gpt2], b'15496 995')
    check(r.stdout == b'Hello world', 'gpt2 detokenize: %r' % r.stdout)

    # --pieces: "id<TAB>piece" per token
    r = run(['tokenize', '-m', stories, '--pieces'], b'Once upon a time')
    lines = r.stdout.decode().splitlines()
    check(lines == ['1\t<s>', '403\t\u2581Once', '407\t\u2581upon', '261\t\u2581a', '378\t\u2581time'],
          '--pieces: %r' % lines)
    r = run(['tokenize', '-m', stories, '--pieces', '--no-bos'], b'\n')
    check(r.stdout.decode().splitlines()[-1] == '%d\t<0x0A>' % (3 + 10), '--pieces newline: %r' % r.stdout)

    # --special: control tokens in the text
    r = run(['tokenize', '-m', stories, '--no-bos', '--special'], b'<s>Once</s>')
    check(ids_of(r.stdout) == [1, 403, 2], '--special: %r' % r.stdout)
    r = run(['tokenize', '-m', stories, '--no-bos'], b'<s>Once</s>')
    check(1 not in ids_of(r.stdout) and 2 not in ids_of(r.stdout), 'no --special: %r' % r.stdout)
    r = run(['detokenize', '-m', stories, '--special'], b'1 403 2')
    check(r.stdout == b'<s>Once</s>', 'detokenize --special: %r' % r.stdout)
    r = run(['detokenize', '-m', stories, '--continuation'], b'403')
    check(r.stdout == b' Once', 'detokenize --continuation: %r' % r.stdout)

    # the independent Python encoder agrees on real text (stories paragraphs)
    ref = SpmRef(stories)
    corpus = open(os.path.join(MODELS, 'corpora', 'tinystories_sample_cs336.txt'), 'rb').read()
    paras = [p for p in corpus.split(b'<|endoftext|>') if p.strip()]
    check(len(paras) >= 3, 'corpus paragraphs')
    for k, p in enumerate(paras):
        r = run(['tokenize', '-m', stories], p)
        got = ids_of(r.stdout)
        exp = ref.encode(p)
        check(got == exp, 'stories paragraph %d: specd and spm_ref differ at %s' %
              (k, next((j for j, (a, b) in enumerate(zip(got, exp)) if a != b), min(len(got), len(exp)))))
        r2 = run(['detokenize', '-m', stories], r.stdout)
        check(r2.stdout == p, 'stories paragraph %d round trip' % k)
    # and on the 32000-token vocabulary (a few Shakespeare lines)
    ref32 = SpmRef(spm)
    shakes = open(os.path.join(MODELS, 'corpora', 'tinyshakespeare_input.txt'), 'rb').read()[:1500]
    r = run(['tokenize', '-m', spm], shakes)
    check(ids_of(r.stdout) == ref32.encode(shakes), 'shakespeare on llama-spm: specd and spm_ref differ')

    # --splits: the pre-tokenizer's pieces as JSON, from a model or by name
    r = run(['tokenize', '--splits', '-m', gpt2], b"I'm  here")
    check(r.returncode == 0 and json.loads(r.stdout) ==
          {'pre': 'gpt-2', 'ends': [1, 3, 4, 9], 'pieces': ['I', "'m", ' ', ' here']}, '--splits -m gpt2: %r' % r.stdout)
    r = run(['tokenize', '--splits', '--pre', 'falcon', '-p', 'x $100'])
    check(json.loads(r.stdout)['pieces'] == ['x', ' ', '$', '100'], '--splits --pre falcon: %r' % r.stdout)
    r = run(['tokenize', '--splits', '-m', stories], b'a b')
    check(json.loads(r.stdout) == {'pre': 'none', 'ends': [3], 'pieces': ['a b']}, '--splits SPM: %r' % r.stdout)
    # -0: NUL-ended texts, one line each (an empty text included); invalid bytes
    # are U+FFFD in "pieces" only
    r = run(['tokenize', '--splits', '--pre', 'qwen2', '-0'], b'ab 12\x00\x00a\xffb')
    out = [json.loads(x) for x in r.stdout.splitlines()]
    check([o['ends'] for o in out] == [[2, 3, 4, 5], [], [1, 3]], '-0 ends: %r' % r.stdout)
    check(out[2]['pieces'] == ['a', '\ufffdb'], '-0 pieces: %r' % r.stdout)
    for args, what in [(['tokenize', '--splits', '--pre', 'tekken', '-p', 'x'], 'unknown --pre'),
                       (['tokenize', '--pre', 'falcon', '-p', 'x'], '--pre without --splits'),
                       (['tokenize', '--splits', '--pre', 'falcon', '-m', gpt2, '-p', 'x'], '--pre with -m'),
                       (['tokenize', '-0', '-m', gpt2, '-p', 'x'], '-0 without --splits'),
                       (['tokenize', '--splits', '-p', 'x'], '--splits without -m or --pre')]:
        r = run(args)
        check(r.returncode == 2 and r.stdout == b'' and r.stderr.strip() != b'', '%s: rc=%d' % (what, r.returncode))
    r = run(['tokenize', '--splits', '--pre', 'tekken', '-p', 'x'])
    check(b"'deepseek-coder'" in r.stderr, 'unknown --pre lists the names: %r' % r.stderr)

    # errors: message on stderr, exit 1
    for args, stdin, what, needle in [
        (['tokenize', '-m', '/nonexistent/model.gguf'], b'x', 'missing model', b'nonexistent'),
        (['tokenize', '-m', spm + '.inp'], b'x', 'not a GGUF file', b''),
        (['detokenize', '-m', stories], b'1 2 512', 'id out of range', b'512'),
        (['detokenize', '-m', stories], b'1 -3', 'negative id', b'-3'),
        (['detokenize', '-m', stories], b'1 hello', 'non-numeric', b'hello'),
        (['detokenize', '-m', stories], b'12x', 'trailing junk', b'12x'),
    ]:
        r = run(args, stdin)
        check(r.returncode == 1 and needle in r.stderr and r.stderr.strip() != b'',
              '%s: rc=%d stderr=%r' % (what, r.returncode, r.stderr))
        check(r.stdout == b'', '%s: nothing on stdout' % what)
    r = run(['tokenize'])
    check(r.returncode != 0 and b'-m' in r.stderr, 'missing -m: rc=%d' % r.returncode)

    print('%d checks, %d failed' % (checks, failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
