# test_pretok_ref.py — specd's BPE pre-tokenizers against an independent
# reference (pretok_ref.py: llama.cpp's regex lists run by the `regex`
# module) for every tokenizer.ggml.pre name specd accepts, on the corpora
# (every tinystories line, every Shakespeare paragraph), the .inp strings of the
# tokenizer vectors and seeded random strings (letters, digit runs, ASCII
# punctuation and white space, contractions, CJK, Hangul, accented Latin,
# combining marks, emoji, symbols, invalid UTF-8). specd's side is
# `specd tokenize --splits --pre NAME -0`. Then deliberately broken variants of
# the reference must be caught (the comparison has to fail).
#
# Code points whose \p{L}/\p{N}/\p{P}/\s class differs between the `regex`
# module's Unicode tables (15.0 in Debian 12) and the Unicode 14 of specd's
# engine/tokenizer/unicode_tables.c (all of them are unassigned in 14: new in 15) are
# left out: the random strings never draw them, and a corpus or vector string
# holding one would be skipped (and counted; none does today). NUL is not
# tested (it ends a text for -0); it is an "other" character like U+0001.
#
#   /usr/bin/python3 test_pretok_ref.py [--break NAME] [--show N]
# --break NAME runs only that broken variant (see pretok_ref.BROKEN) and exits 1
# when it is caught; --show N prints up to N mismatches per name (default 3).
import json
import os
import random
import subprocess
import sys
import time
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pretok_ref  # noqa: E402
from pretok_ref import NAMES, PretokRef, decode  # noqa: E402

SPECD = os.environ.get('SPECD', '')
MODELS = os.environ.get('SPECD_MODELS', '')
SEED = 22
N_RANDOM = 4000


def specd_splits(name, texts):
    """specd's piece ends (byte offsets) of each text (no NUL inside) with pre-tokenizer name."""
    r = subprocess.run([SPECD, 'tokenize', '--splits', '--pre', name, '-0'],
                       input=b''.join(t + b'\0' for t in texts), capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError('specd tokenize --splits --pre %s: rc=%d %s' % (name, r.returncode, r.stderr[-400:]))
    out = [json.loads(line)['ends'] for line in r.stdout.splitlines()]
    if len(out) != len(texts):
        raise RuntimeError('specd gave %d splits for %d texts' % (len(out), len(texts)))
    return out


def pieces(data, ends):
    return [data[a:b] for a, b in zip([0] + ends[:-1], ends)]


# ---- the strings --------------------------------------------------------------

def corpus_strings():
    """Every line of the tinystories files and every paragraph of Shakespeare."""
    out = []
    cdir = os.path.join(MODELS, 'corpora')
    for f in ('tinystories_sample_cs336.txt', 'tinystories_valid_30K.txt'):
        out += [ln for ln in open(os.path.join(cdir, f), 'rb').read().splitlines(keepends=True)]
    shakes = open(os.path.join(cdir, 'tinyshakespeare_input.txt'), 'rb').read()
    out += [p + b'\n\n' for p in shakes.split(b'\n\n')]
    return out


def vector_strings():
    out = []
    vdir = os.path.join(MODELS, 'tokenizer-vectors')
    for f in sorted(os.listdir(vdir)):
        if f.endswith('.inp'):
            out += open(os.path.join(vdir, f), 'rb').read().split(b'\n__ggml_vocab_test__\n')[:-1]
    return out


def random_strings(n, excluded):
    rng = random.Random(SEED)

    def cp_in(lo, hi):
        while True:
            c = rng.randint(lo, hi)
            if c not in excluded and not 0xD800 <= c <= 0xDFFF and c != 0:
                return chr(c)

    def word(alpha, lo=1, hi=8):
        return ''.join(rng.choice(alpha) for _ in range(rng.randint(lo, hi)))

    lower, upper = 'abcdefghijklmnopqrstuvwxyz', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ'
    accented = 'àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßÀÉÎÕÜŒœŠšŽžłŁđĐǅǈǋ'
    greek = 'αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΩάέήίόύώἀἁὰὴὶᾳῆῶΐΰ\u1f7d\u1fd3\u1fbe'
    cyrillic = 'абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГДЁЖ'
    digits = '0123456789'
    other_digits = '٠١٢٣٤٥٦٧٨٩०१२३०１２３４５６７８９²³¹½¼¾ⅠⅡⅫⅻ①②⑩'
    punct = '!"#%&\'()*,-./:;?@[\\]_{}'
    symbols = '$+<=>^~|`'
    unicode_punct = '¡¿«»‘’“”„‟‹›–—…‰′″※、。「」『』【】〈〉・！？，．：；（）［］｛｝～＂＃＄％＆＇＊＋－／＝＠＼＾＿｀｜'
    unicode_sym = '€£¥¢©®°±×÷∑∏√∞≈≠≤≥←→↑↓⇒∀∃∈∧∨⊂⌘★☆♠♥♦♣♪✓✗\ufffd'
    spaces = [' ', '  ', '   ', '    ', '\n', '\n\n', '\r', '\r\n', '\t', '\t\t', ' \n', '\n ', ' \t ', '\x0b',
              '\x0c', '\x85', '\u00a0', '\u1680', '\u2000', '\u2009', '\u200a', '\u2028', '\u2029', '\u202f',
              '\u205f', '\u3000', '\u3000\u3000']
    contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D",
                    "'x", "'", "''", "'r", "'l", "'v"]
    combining = [chr(c) for c in range(0x300, 0x370)] + ['\u0483', '\u05b0', '\u0610', '\u093c', '\u0e31',
                                                       '\u20d7', '\ufe0f', '\u200d']
    emoji = ['🦙', '😀', '🎉', '👍🏽', '👨‍👩‍👧', '🇩🇪', '❤️', '🙂', '🚀', '🥲', '🫠', '✨', '⚡', '🧑‍💻']
    invalid = [b'\xff', b'\xfe', b'\x80', b'\xbf', b'\xc0\x80', b'\xc1\xbf', b'\xc3', b'\xe4\xbd', b'\xe4',
               b'\xed\xa0\x80', b'\xed\xbf\xbf', b'\xf0\x9f', b'\xf0\x80\x80\x80', b'\xf4\x90\x80\x80',
               b'\xf5\x80\x80\x80', b'\xf8\x88\x80\x80\x80', b'\xe0\x80\xaf', b'\x80\x80']
    controls = [chr(c) for c in range(1, 0x20) if chr(c) not in '\t\n\x0b\x0c\r'] + ['\x7f', '\u200b', '\u2060',
                                                                                   '\ufeff', '\u00ad', '\ue000']

    gens = [
        (10, lambda: word(lower)), (4, lambda: word(upper, 1, 4)), (3, lambda: word(lower + upper)),
        (6, lambda: word(digits, 1, 7)), (2, lambda: word(other_digits, 1, 4)),
        (6, lambda: word(punct, 1, 3)), (4, lambda: word(symbols, 1, 3)), (8, lambda: rng.choice(spaces)),
        (5, lambda: rng.choice(contractions)), (3, lambda: word(accented, 1, 5)), (2, lambda: word(greek, 1, 5)),
        (2, lambda: word(cyrillic, 1, 5)), (3, lambda: rng.choice(lower) + rng.choice(combining)),
        (2, lambda: rng.choice(combining)),
        (4, lambda: ''.join(cp_in(0x4E00, 0x9FFF) for _ in range(rng.randint(1, 4)))),  # CJK (+ past 9FA5)
        (2, lambda: ''.join(cp_in(0x9FA0, 0x9FAA) for _ in range(rng.randint(1, 3)))),  # the 9FA5 edge
        (3, lambda: ''.join(cp_in(0x0800, 0x4E00) for _ in range(rng.randint(1, 3)))),  # deepseek's ࠀ-一
        (1, lambda: ''.join(cp_in(0x3040, 0x30FF) for _ in range(rng.randint(1, 4)))),  # kana
        (1, lambda: ''.join(cp_in(0x3400, 0x4DBF) for _ in range(rng.randint(1, 2)))),  # CJK ext A
        (3, lambda: ''.join(cp_in(0xAC00, 0xD7A3) for _ in range(rng.randint(1, 4)))),  # Hangul syllables
        (1, lambda: ''.join(cp_in(0xD7B0, 0xD7FF) for _ in range(rng.randint(1, 2)))),  # Hangul jamo ext B
        (1, lambda: ''.join(cp_in(0x1100, 0x11FF) for _ in range(rng.randint(1, 3)))),  # Hangul jamo
        (1, lambda: ''.join(cp_in(0x2100, 0x218F) for _ in range(rng.randint(1, 3)))),  # letterlike, numbers
        (1, lambda: ''.join(cp_in(0x1F00, 0x1FFF) for _ in range(rng.randint(1, 3)))),  # polytonic Greek
        (1, lambda: ''.join(cp_in(0xFF00, 0xFFEF) for _ in range(rng.randint(1, 3)))),  # fullwidth
        (1, lambda: ''.join(cp_in(0x2000, 0x206F) for _ in range(rng.randint(1, 3)))),  # general punctuation
        (1, lambda: cp_in(0x10000, 0x10FFFF)), (1, lambda: cp_in(0x80, 0xFFFF)),
        (3, lambda: word(unicode_punct, 1, 3)), (3, lambda: word(unicode_sym, 1, 2)),
        (3, lambda: rng.choice(emoji)), (2, lambda: rng.choice(controls)),
        (3, lambda: rng.choice(invalid)),
    ]
    weights = [w for w, _ in gens]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 24)):
            p = rng.choices(gens, weights)[0][1]()
            parts.append(p if isinstance(p, bytes) else p.encode('utf-8'))
        out.append(b''.join(parts))
    return out


# ---- comparison ---------------------------------------------------------------

def shrink(name, ref, data, rounds=60):
    """A short sub-string of data on which specd and ref still disagree: runs
    of code points removed, halves first, then smaller (at most rounds specd
    calls, each on every candidate of one size)."""
    size = None
    for _ in range(rounds):
        _, offs = decode(data)
        n = len(offs) - 1
        size = max(1, n // 2) if size is None else size
        cands = [data[:offs[i]] + data[offs[min(n, i + size)]:] for i in range(0, n, size)]
        hit = next((c for c, g in zip(cands, specd_splits(name, cands)) if g != ref.split(c)), None)
        if hit is not None:
            data = hit
            size = min(size, max(1, (len(decode(data)[1]) - 1) // 2))
        elif size > 1:
            size //= 2
        else:
            break
    return data


def compare(name, ref, texts, got, show):
    """Number of texts where specd's ends differ from ref's; prints up to show."""
    bad = 0
    for t, g in zip(texts, got):
        want = ref.split(t)
        if g == want:
            continue
        bad += 1
        if bad <= show:
            m = shrink(name, ref, t)
            print('  %s: specd %r\n  %s  ref   %r\n  %s  (from %r)' % (
                name, pieces(m, specd_splits(name, [m])[0]), ' ' * len(name), pieces(m, ref.split(m)),
                ' ' * len(name), t[:200]), file=sys.stderr)
    return bad


def main():
    show = 3
    only_break = None
    args = sys.argv[1:]
    while args:
        a = args.pop(0)
        if a == '--break' and args:
            only_break = args.pop(0)
        elif a == '--show' and args:
            show = int(args.pop(0))
        else:
            print('usage: test_pretok_ref.py [--break NAME] [--show N]', file=sys.stderr)
            return 2
    if pretok_ref.regex is None:
        print('FAIL: the Python `regex` module (Debian package python3-regex) is not installed; '
              'tests/deps.sh installs it (apt-get install python3-regex)', file=sys.stderr)
        return 1
    if not SPECD or not os.access(SPECD, os.X_OK):
        print('SKIP: specd binary not found ($SPECD=%r)' % SPECD, file=sys.stderr)
        return 77
    if not os.path.isdir(os.path.join(MODELS, 'corpora')) or not os.path.isdir(
            os.path.join(MODELS, 'tokenizer-vectors')):
        print('SKIP: shared models missing under %r' % MODELS, file=sys.stderr)
        return 77
    t0 = time.time()
    excluded = pretok_ref.category_mismatches()
    sets = {'corpus': corpus_strings(), 'vectors': vector_strings(), 'random': random_strings(N_RANDOM, excluded)}
    texts, skipped = [], 0
    for k in sets:
        keep = []
        for t in sets[k]:
            if b'\0' in t or any(ord(c) in excluded for c in decode(t)[0]):
                skipped += 1  # NUL ends a text for -0; excluded: see the header
            else:
                keep.append(t)
        sets[k] = keep
        texts += keep
    new = sum(unicodedata.category(chr(c)) == 'Cn' for c in excluded)
    print('%d strings: %s; %d skipped (NUL, or a code point whose class differs between Unicode 14 and '
          'the regex module: %d such code points, %d of them unassigned in Unicode 14)' % (
              len(texts), ', '.join('%d %s' % (len(v), k) for k, v in sets.items()), skipped, len(excluded), new),
          file=sys.stderr)

    if only_break:
        btype = pretok_ref.BROKEN[only_break][0]
        name = next(n for n, ty in NAMES.items() if ty == btype)
        bad = compare(name, PretokRef(btype, only_break), texts, specd_splits(name, texts), show)
        print('broken variant %s: %d mismatches' % (only_break, bad), file=sys.stderr)
        return 1 if bad else 0

    failures = 0
    refs, want = {}, {}
    for name, ty in NAMES.items():
        if ty not in refs:
            refs[ty] = PretokRef(ty)
            want[ty] = [refs[ty].split(t) for t in texts]
        got = specd_splits(name, texts)
        bad = sum(g != w for g, w in zip(got, want[ty]))
        if bad:
            compare(name, refs[ty], texts, got, show)
        print('%-15s (%s): %d/%d strings split as the reference' % (name, ty, len(texts) - bad, len(texts)),
              file=sys.stderr)
        failures += bad > 0

    # the comparison must be able to fail: each broken reference is caught
    for b, (ty, _, _) in pretok_ref.BROKEN.items():
        name = next(n for n, t in NAMES.items() if t == ty)
        broken = PretokRef(ty, b)
        got = specd_splits(name, texts)
        bad = sum(g != broken.split(t) for g, t in zip(got, texts))
        print('broken variant %s (%s): %d mismatches (must be > 0)' % (b, name, bad), file=sys.stderr)
        failures += bad == 0

    print('%.1f s; %d failed' % (time.time() - t0, failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
