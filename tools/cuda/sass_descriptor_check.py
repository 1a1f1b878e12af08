#!/usr/bin/env python3
"""Scans `cuobjdump -sass` output for memory instructions whose descriptor register is never written.

Hopper SASS addresses global memory through a 64-bit descriptor in a uniform register pair
(`desc[URn]`), set once per kernel (ULDC.64 from the constant bank, UMOV, R2UR, ...). CUDA 13.0's
ptxas gave two LDGSTS (cp.async with an L2 cache hint) of the W8A16 kernels a `desc[UR1]` that no
instruction of the kernel writes; they stopped with cudaErrorIllegalInstruction on the H200
(docs/QUANTIZATION.md). This check flags that pattern in every kernel of a build.

Usage (on the GPU machine, after scripts/device_build.sh):
  find build-device/obj/src/backend/cuda -name '*.o' | while read -r o; do cuobjdump -sass $o; done > all.sass
  python3 tools/cuda/sass_descriptor_check.py all.sass
Exit status 1 when a kernel has a suspect descriptor.
"""
import re
import sys

WRITE = re.compile(r"\b(?:ULDC(?:\.\w+)*|UMOV|R2UR(?:\.\w+)*|S2UR|UIADD3(?:\.\w+)*|ULEA(?:\.\w+)*|UIMAD(?:\.\w+)*|"
                   r"USHF(?:\.\w+)*|ULOP3(?:\.\w+)*|USEL|UPRMT|USGXT(?:\.\w+)*|UBMSK|UFLO(?:\.\w+)*|UPOPC|UBREV)\s+(UR\d+)")
DESC = re.compile(r"desc\[(UR\d+)\]")


def suspects(body):
    written = {m.group(1) for line in body for m in WRITE.finditer(line)}
    bad = []
    for line in body:
        for m in DESC.finditer(line):
            n = int(m.group(1)[2:])
            # a 64-bit pair URn:URn+1 written as one (ULDC.64 URn) or by halves
            if not ({f"UR{n}", f"UR{n + 1}", f"UR{n - 1}"} & written):
                bad.append(line.strip()[:140])
    return bad


def main(path):
    functions, name, body = [], None, []
    for line in open(path, errors="replace"):
        if "Function :" in line:
            if name:
                functions.append((name, body))
            name, body = line.split("Function :", 1)[1].strip(), []
        elif name:
            body.append(line)
    if name:
        functions.append((name, body))
    total = 0
    for fn, b in functions:
        bad = suspects(b)
        if bad:
            total += len(bad)
            print("SUSPECT", fn[:160])
            for line in bad[:4]:
                print("   ", line)
    print(f"{len(functions)} functions scanned, {total} suspect descriptor uses")
    return 1 if total else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
