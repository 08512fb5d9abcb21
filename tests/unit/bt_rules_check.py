#!/usr/bin/env python3
"""bt_rules_check.py - strata's CFI interpreter (src/backtrace.c) against readelf's: for
every row of every FDE of a library's .eh_frame (`readelf --debug-dump=frames-interp`), the
rule strata computes for a return address at the row's first byte + 1 and at its last
byte + 1 must be readelf's (CFA = rsp/rbp + offset, rbp saved at CFA + k or not, return
address at CFA - 8 or undefined), or "hard" (libgcc's) where readelf shows an expression,
another register, a signal frame or an undefined rbp.

usage: bt_rules_check.py UNIT_BACKTRACE LIB...   (LIB "-" is UNIT_BACKTRACE itself)
Exit 77 when readelf is missing or a library cannot be found (skip).
"""
import re
import shutil
import subprocess
import sys

HDR = re.compile(r"^([0-9a-f]+) [0-9a-f]+ ([0-9a-f]+) (CIE|FDE)(.*)$")


def parse(path):
    # readelf exits 1 on some libraries (libc.so.6) after printing the whole table
    out = subprocess.run(["readelf", "--debug-dump=frames-interp", path], capture_output=True,
                         text=True).stdout
    cies, fdes = {}, []
    cur = None
    for line in out.splitlines():
        m = HDR.match(line)
        if m:
            off, kind, rest = m.group(1), m.group(3), m.group(4)
            if kind == "CIE":
                aug = re.search(r'"([^"]*)"', rest).group(1)
                cur = {"kind": "CIE", "aug": aug, "rows": [], "cols": None}
                cies[int(off, 16)] = cur
            else:
                cie = int(re.search(r"cie=([0-9a-f]+)", rest).group(1), 16)
                lo, hi = re.search(r"pc=([0-9a-f]+)\.\.([0-9a-f]+)", rest).groups()
                cur = {"kind": "FDE", "cie": cie, "lo": int(lo, 16), "hi": int(hi, 16), "rows": [], "cols": None}
                fdes.append(cur)
            continue
        if "ZERO terminator" in line:
            cur = None
        if cur is None:
            continue
        f = line.split()
        if f[:2] == ["LOC", "CFA"]:
            cur["cols"] = f[2:]
        elif cur["cols"] is not None and len(f) == len(cur["cols"]) + 2 and re.fullmatch(r"[0-9a-f]+", f[0]):
            cur["rows"].append((int(f[0], 16), f[1], dict(zip(cur["cols"], f[2:]))))
    return cies, fdes


def expected(cfa, regs, signal):
    """(kind, reg, off, rbp_saved, rbp_off, ra_undef) or 'hard' or 'hard_ok' (either)."""
    if signal:
        return "hard"
    m = re.fullmatch(r"(rsp|rbp)\+(-?\d+)", cfa)
    if not m or regs.get("rsp", "u") != "u":
        return "hard"
    rbp, ra = regs.get("rbp", "u"), regs.get("ra", "u")
    either = False
    if rbp in ("u", "s"):
        saved, k = 0, 0
        either = rbp == "u"  # unspecified or DW_CFA_undefined: readelf prints both as u
    else:
        mm = re.fullmatch(r"c(-?\d+)", rbp)
        if not mm:
            return "hard"
        saved, k = 1, int(mm.group(1))
    if ra == "u":
        undef = 1
    elif ra == "c-8":
        undef = 0
    else:
        return "hard"
    return (1, m.group(1), int(m.group(2)), saved, k, undef, either)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    exe, libs = sys.argv[1], sys.argv[2:]
    if shutil.which("readelf") is None:
        print("SKIP: readelf (binutils) is missing")
        return 77
    bad = total = hard = 0
    for lib in libs:
        path = exe if lib == "-" else None
        if path is None:
            for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
                p = f"{d}/{lib}"
                if subprocess.run(["test", "-f", p]).returncode == 0:
                    path = p
                    break
        if path is None:
            print(f"SKIP: {lib} not found")
            return 77
        cies, fdes = parse(path)
        queries = []
        for fde in fdes:
            cie = cies.get(fde["cie"])
            if cie is None:
                continue
            signal = "S" in cie["aug"]
            rows = fde["rows"] or [(fde["lo"], c, r) for (_, c, r) in cie["rows"]]
            for i, (loc, cfa, regs) in enumerate(rows):
                end = rows[i + 1][0] if i + 1 < len(rows) else fde["hi"]
                if end <= loc:
                    continue
                exp = expected(cfa, regs, signal)
                queries.append((loc + 1, exp, fde))
                if end - 1 > loc:
                    queries.append((end, exp, fde))
        out = subprocess.run([exe, "rules", lib], input="".join(f"{q[0]:x}\n" for q in queries),
                             capture_output=True, text=True, check=True).stdout.splitlines()
        got = out[1:]
        if len(got) != len(queries):
            print(f"{lib}: {len(got)} answers for {len(queries)} queries")
            return 1
        nbad = nhard = 0
        for (ra, exp, fde), line in zip(queries, got):
            f = line.split()
            kind, reg, off, saved, k, undef = int(f[1]), f[2], int(f[3]), int(f[4]), int(f[5]), int(f[6])
            if kind == 3:
                nhard += 1
            if exp == "hard":
                ok = kind == 3
            else:
                either = exp[6]
                ok = (kind, reg, off, saved, k, undef) == exp[:6] or (either and kind == 3)
            if not ok:
                nbad += 1
                if nbad <= 10:
                    print(f"{lib}: ra {ra:#x} (FDE {fde['lo']:#x}..{fde['hi']:#x}): strata {line!r}, readelf {exp}")
        print(f"{lib}: {len(queries)} return addresses, {nhard} hard, {nbad} wrong")
        bad += nbad
        total += len(queries)
        hard += nhard
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
