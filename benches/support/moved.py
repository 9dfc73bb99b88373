"""Memory moved per call, for `benches/profile.sh`: given how many memcpy/memmove calls
a `tools/call` makes (counted by `perf stat`), and a record of such calls (`perf script
-F trace` of uprobes on libc's memmove: `len=<bytes> ret=<return address>` each; `perf
record` keeps a share of them when they come too fast, spread over the calls alike), the
bytes moved per `tools/call`, the functions of the proxy's executable that move most
(the return address looked up with addr2line: inlined code counts for the function it is
inlined into), the lengths moved most, and the sites that move most with the code inlined
into each (file:line where the executable has line tables).

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
    sizes = collections.Counter()  # (length, site) -> calls: one value moved whole
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
        sizes[(length, site)] += 1

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

    # A value moved from one level to the next is one length copied at many sites: the
    # lengths that move most say which values to keep in place (or behind a pointer).
    by_length = collections.Counter()
    calls_by_length = collections.Counter()
    for (length, _), count in sizes.items():
        by_length[length] += length * count
        calls_by_length[length] += count
    print(f"  the {TOP} lengths moved most (calls / bytes per call):")
    for length, count in by_length.most_common(TOP):
        print(f"    {calls_by_length[length] / represented:6.1f} {count / represented:7.0f} B  {length} B each")

    # Where: the sites that move most, each with the code inlined into it, innermost
    # first (file:line only in a build with line tables:
    # CARGO_PROFILE_RELEASE_DEBUG=line-tables-only).
    top = [key for key, _ in sorted(sizes.items(), key=lambda kv: -kv[0][0] * kv[1])[:TOP]]
    chains = inlined([site for _, site in top if site is not None], args.exe)
    print(f"  the {TOP} sites moving most (calls / bytes per call, where):")
    for length, site in top:
        count = sizes[(length, site)]
        where = " <- ".join(chains.get(site, ["(outside the executable)"])[:3])
        print(f"    {count / represented:6.1f} {length * count / represented:7.0f} B  {where}")


def inlined(sites: list, exe: str) -> dict:
    """Each site's chain of functions, innermost first, with file:line where known."""
    if not sites:
        return {}
    out = subprocess.run(
        ["addr2line", "-f", "-C", "-i", "-a", "-e", exe] + [hex(s) for s in sites],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    chains = {}
    site = None
    i = 0
    while i < len(out):
        line = out[i]
        if line.startswith("0x"):
            site = int(line, 16)
            chains[site] = []
            i += 1
            continue
        location = out[i + 1].rsplit("/", 1)[-1] if i + 1 < len(out) else "?"
        if site is not None:
            # Without line tables addr2line names no line ("…:?" or "??:0").
            known = not (location.startswith("??") or location.endswith(":?"))
            chains[site].append(shorten(line) + (f" @{location}" if known else ""))
        i += 2
    return chains


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
