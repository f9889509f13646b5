"""The one bisection: the largest value up to an edge, where a question holds for every value up to it and for none
above (vLLM's fit of max-model-len, and fit's and recommend's questions)."""


def largest(problem, low: int, high: int) -> int | None:
    """The largest n in [low, high] where problem(n) is falsy (no problem), which holds up to an edge and not above
    it; None when there is a problem at low already. high is asked first: where it has no problem, nothing else is."""
    if not problem(high):
        return high
    if problem(low):
        return None
    good, bad = low, high
    while bad - good > 1:
        middle = (good + bad) // 2
        if problem(middle):
            bad = middle
        else:
            good = middle
    return good
