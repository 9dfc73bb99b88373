"""Memory moved per call, for `benches/profile.sh`: given how many memcpy/memmove calls
a `tools/call` makes (counted by `perf stat`), and a record of such calls (`perf script
-F trace` of uprobes on libc's memmove: `len=<bytes> ret=<return address>` each; `perf
record` keeps a share of them when they come too fast, spread over the calls alike), the
bytes moved per `tools/call` and the functions of the proxy's executable that move most
(the return address looked up with addr2line: inlined code counts for the function it is
inlined into).

    perf script -F trace | python3 moved.py --per-call X --base HEX --exe PATH
"""

import argparse
import collections
import re
import subprocess
import sys

TOP = 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--per-call", type=float, required=True, help="memcpy/memmove calls per tools/call"
    )
    parser.add_argument("--base", required=True, help="where the executable is mapped (hex)")
    parser.add_argument("--exe", required=True, help="the proxy's executable")
    args = parser.parse_args()
    base = int(args.base, 16)

    sites = collections.Counter()  # (offset in the executable, or None) -> calls
    moved = collections.Counter()  # the same -> bytes
    for line in sys.stdin:
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "len" not in fields or "ret" not in fields:
            continue
        length = int(fields["len"])
        offset = int(fields["ret"], 16) - base
        # A return address outside the executable (a library's own copy) has no name here.
        site = offset if 0 <= offset < 1 << 32 else None
        sites[site] += 1
        moved[site] += length

    recorded = sum(sites.values())
    if recorded == 0 or args.per_call <= 0:
        print("  no memcpy/memmove call recorded")
        return
    # The tools/calls whose memory moves the record holds.
    represented = recorded / args.per_call
    print(f"  memcpy/memmove calls per call  {args.per_call:.1f} ({recorded} recorded)")
    print(f"  bytes moved per call           {sum(moved.values()) / represented:.0f}")

    named = [site for site in sites if site is not None]
    names = {}
    if named:
        out = subprocess.run(
            ["addr2line", "-f", "-C", "-e", args.exe] + [hex(s) for s in named],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.splitlines()
        # Two lines per address: the function, then file:line.
        for i, site in enumerate(named):
            function = out[2 * i] if 2 * i < len(out) else "??"
            names[site] = shorten(function)
    by_function = collections.Counter()
    calls_by_function = collections.Counter()
    for site, count in sites.items():
        name = names.get(site, "(outside the executable)")
        by_function[name] += moved[site]
        calls_by_function[name] += count
    print(f"  the {TOP} functions moving most (calls / bytes per call):")
    for name, count in by_function.most_common(TOP):
        print(f"    {calls_by_function[name] / represented:6.1f} {count / represented:7.0f} B  {name}")


def shorten(function: str) -> str:
    """A function's name without generic arguments and the crate's own prefix."""
    previous = None
    while previous != function:
        previous = function
        # Generic arguments follow a name; `<T as Trait>` does not, and stays.
        function = re.sub(r"(?<=[\w>])<[^<>]*>", "", function)
    return function.replace("mcp_session_proxy::", "")[:100]


if __name__ == "__main__":
    main()
