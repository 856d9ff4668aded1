#!/usr/bin/env python3
"""test_readback.py — reads the telemetry database back independently of
engine/telemetry/telemetry.c (Python's sqlite3): the synthetic workload's rows and sums
are exactly what was produced, and `specd telemetry summary|sessions` print
the same figures.  Usage: test_readback.py TEST_TELEMETRY_EXE SPECD_EXE"""
import json, os, re, sqlite3, subprocess, sys, tempfile

SESSIONS, STEPS = 24, 250  # as in test_telemetry.c


def step(s, k):
    g = 0 if k % 10 == 9 else 1 + (s + k) % 8
    a = (7 * s + 3 * k) % (g + 1) if g else 0
    return g, a


def main():
    writer, specd = sys.argv[1], sys.argv[2]
    failures = 0

    def check(cond, what):
        nonlocal failures
        if not cond:
            failures += 1
            print("CHECK failed:", what, file=sys.stderr)

    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "t.db")
        out = subprocess.run([writer, "write", db], capture_output=True, text=True, check=True).stdout
        claimed = json.loads(out)

        exp_acc = exp_rej = exp_drafted = exp_verify = 0
        per_type = {}
        for s in range(SESSIONS):
            ct = ["chat", "code", "structured"][s % 3]
            for k in range(STEPS):
                g, a = step(s, k)
                exp_acc += a
                exp_rej += g - a if g else 0
                exp_drafted += g
                exp_verify += g > 0
                t = per_type.setdefault(ct, [0, 0])
                t[0] += a
                t[1] += g
        check(claimed == {"accepted": exp_acc, "rejected": exp_rej, "steps": SESSIONS * STEPS,
                          "drafted": exp_drafted}, f"writer's own sums {claimed}")

        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        n, acc, rej, drafted = con.execute(
            "SELECT count(*), sum(n_accepted), sum(n_rejected), sum(gamma_used) FROM speculation_steps").fetchone()
        check(n == SESSIONS * STEPS, f"step rows {n}")
        check(acc == exp_acc, f"sum accepted {acc} != {exp_acc}")
        check(rej == exp_rej, f"sum rejected {rej} != {exp_rej}")
        check(drafted == exp_drafted, f"sum gamma {drafted} != {exp_drafted}")
        rows = con.execute("SELECT s.content_type, sum(st.n_accepted), sum(st.gamma_used) FROM speculation_steps st"
                           " JOIN speculation_sessions s USING(session_id) GROUP BY 1").fetchall()
        check({r[0]: [r[1], r[2]] for r in rows} == per_type, f"per content type {rows} vs {per_type}")
        check(con.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "integrity_check")
        sess = con.execute("SELECT count(*), sum(status='completed'), sum(total_target_passes) "
                           "FROM speculation_sessions").fetchone()
        check(sess == (SESSIONS, SESSIONS - SESSIONS // 5, SESSIONS * STEPS), f"sessions {sess}")
        con.close()

        r = subprocess.run([specd, "telemetry", "--db", db, "summary", "--since", "1"], capture_output=True,
                           text=True)
        print(r.stdout)
        check(r.returncode == 0, f"summary exit {r.returncode}: {r.stderr}")
        overall = re.search(r"^overall\n.*\n\s+all\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)", r.stdout, re.M)
        check(overall is not None, "overall line")
        if overall:
            check(int(overall.group(1)) == SESSIONS * STEPS, "summary steps")
            check(int(overall.group(2)) == exp_verify, "summary verify steps")
            check(overall.group(3) == f"{100 * exp_acc / exp_drafted:.1f}", f"summary accept% {overall.group(3)}")
            check(overall.group(4) == f"{exp_acc / exp_verify:.2f}", f"summary mean_acc {overall.group(4)}")
        for ct, (a, g) in per_type.items():
            m = re.search(rf"^\s+{ct}\s+\d+\s+\d+\s+([\d.]+)", r.stdout, re.M)
            check(m is not None and m.group(1) == f"{100 * a / g:.1f}", f"summary row for {ct}")
        check(re.search(r"^\s+llama-aaaa \+ llama-dddd\s+3000\s", r.stdout, re.M) is not None, "pair row")

        r = subprocess.run([specd, "telemetry", "--db", db, "sessions", "--last", "5"], capture_output=True,
                           text=True)
        print(r.stdout)
        check(r.returncode == 0, "sessions exit")
        lines = [l for l in r.stdout.splitlines() if l.strip()]
        check(len(lines) == 6, f"sessions: header + 5 rows, got {len(lines)}")

        r = subprocess.run([specd, "telemetry", "--db", os.path.join(d, "none.db"), "summary"],
                           capture_output=True, text=True)
        check(r.returncode == 1 and "no telemetry database" in r.stderr, f"missing db: {r.stderr}")

    print(f"{failures} failed", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
