"""Memory moved per call, for `benches/profile.sh`: given how many memcpy/memmove calls
a `tools/call` makes (counted by `perf stat`), and a record of such calls (`perf script
-F trace` of uprobes on libc's memmove: `len=<bytes> ret=<return address>` each; `perf
record` keeps a share of them when they come too fast, spread over the calls alike), the
bytes moved per `tools/call`, the functions of the proxy's executable that move most
(the symbol each copy's call lies in, from the executable's symbol table: inlined code
counts for the function it is inlined into), the lengths moved most, and the copies that
move most with the code inlined into each site (addr2line; file:line where the
executable has line tables).

    perf script -F trace | python3 moved.py --per-call X --base HEX --exe PATH
"""

import argparse
import bisect
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

    # A copy inlined from another function (a move of a future, an answer returned)
    # counts for the function it is inlined into: the symbol the site lies in.
    named = [site for site in sites if site is not None]
    functions = containing(named, args.exe)
    by_function = collections.Counter()
    calls_by_function = collections.Counter()
    for site, count in sites.items():
        name = functions.get(site, "(outside the executable)")
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

    # Where: the copies (a length at a site) that move most, each with the code inlined
    # into its site — the innermost frame and the two outermost (file:line only in a
    # build with line tables: CARGO_PROFILE_RELEASE_DEBUG=line-tables-only).
    top = sorted(sizes.items(), key=lambda kv: -kv[0][0] * kv[1])[:TOP]
    chains = inlined([site for (_, site), _ in top if site is not None], args.exe)
    print(f"  the {TOP} copies moving most (calls / bytes per call, where):")
    for (length, site), count in top:
        chain = chains.get(site) or [("(outside the executable)", None)]
        frames = chain if len(chain) <= 3 else [chain[0], ("…", None)] + chain[-2:]
        where = " <- ".join(name + (f" @{at}" if at else "") for name, at in frames)
        print(f"    {count / represented:6.1f} {length * count / represented:7.0f} B  {length} B  {where}")


def containing(sites: list, exe: str) -> dict:
    """The function (symbol) each site lies in, from the executable's symbol table."""
    if not sites:
        return {}
    out = subprocess.run(
        ["nm", "-C", "--defined-only", exe], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    symbols = []
    for line in out:
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in "tTwW" and parts[0]:
            symbols.append((int(parts[0], 16), parts[2]))
    symbols.sort()
    starts = [start for start, _ in symbols]
    found = {}
    for site in sites:
        # The call is the byte before the return address.
        i = bisect.bisect_right(starts, site - 1) - 1
        if i >= 0:
            found[site] = shorten(symbols[i][1])
    return found


def inlined(sites: list, exe: str) -> dict:
    """Each site's chain of (function, file:line or None), innermost first. A site is a
    return address: the call before it is looked up (one byte back), so that the line
    named is the copy's, not the next one's."""
    if not sites:
        return {}
    out = subprocess.run(
        ["addr2line", "-f", "-C", "-i", "-a", "-e", exe] + [hex(s - 1) for s in sites],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    chains = {}
    site = None
    i = 0
    # For each address: the address, then a function line and a file:line line per
    # frame, innermost first.
    while i < len(out):
        line = out[i]
        if line.startswith("0x"):
            site = int(line, 16) + 1
            chains[site] = []
            i += 1
            continue
        at = out[i + 1] if i + 1 < len(out) else ""
        if site is not None:
            chains[site].append((shorten(line), location(at)))
        i += 2
    return chains


def location(at: str):
    """`dir/file.rs:line` of addr2line's `/path/dir/file.rs:line (discriminator N)`;
    None when it names no line (a build without line tables: `…:?`, `??:0`, `file:0`)."""
    at = at.split(" (discriminator", 1)[0].strip()
    path, _, line = at.rpartition(":")
    if not path or path.startswith("??") or not line.isdigit() or line == "0":
        return None
    return "/".join(path.split("/")[-2:]) + ":" + line


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
