"""The security tally's summary line (conftest.py prints it; under pytest-xdist the root conftest.py, from the tallies
of every worker)."""


def security_line(tallies: list[dict]) -> str | None:
    """One line for the tallies of one or more processes of a run: {tried, contained, not contained, users}."""
    tried = sum(t["tried"] for t in tallies)
    if not tried:
        return None
    contained = sum(t["contained"] for t in tallies)
    escaped = [name for t in tallies for name in t["not contained"]]
    line = f"astra-sandbox security ({tallies[0]['users']}): {tried} hostile snippets tried, {contained} contained"
    if escaped:
        line += f" (NOT contained: {', '.join(escaped)})"
    return line
