"""Figures published for one deployment, which a plan of that deployment is held against: vLLM PR #62860's table of
KV tokens per rank (the seed). Where plan's figure is off the published one, the plan says so on its first screen,
with what is known of why, until the two agree. Pure data and one comparison; report.py words it."""

from dataclasses import dataclass

from dsa_kvcalc.capacity import Plan
from dsa_kvcalc.units import GIB

AGREES = 0.001  # a figure within 0.1 % of the published one agrees (the seed's figures are whole blocks)


@dataclass(frozen=True)
class Published:
    source: str
    deployment: dict  # recipe keys as Recipe.shape spells them, with the values the source states
    versions: tuple[str, ...]  # the vllm-versions whose rules stand for the build the source measured
    graphs_gib: dict  # backend -> the CUDA graphs the source measured, GiB as it prints them
    kv_cache_tokens: dict  # (backend, reserves the decode logits) -> KV tokens per rank
    gaps: dict  # backend -> what is known of why plan's figure is off the published one


SEED = Published(
    source="vLLM PR #62860",  # the table in the PR's description
    deployment={"model": "deepseek-ai/DeepSeek-V4.1-Flash", "gpu": "B200", "data-parallel-size": 4,
                "enable-expert-parallel": True, "max-num-seqs": 256, "max-model-len": 1_048_576,
                "speculative-config.num_speculative_tokens": 5, "gpu-memory-utilization": 0.97},
    # measured on vLLM main before and after the PR's merge (317081f), before 0.33.0 was cut: 0.33.0's rules are
    # main's without #62860
    versions=("0.33.0", "main"),
    graphs_gib={"auto": 18.40, "deep_select": 12.39},
    kv_cache_tokens={("auto", False): 41_050_274, ("auto", True): 36_636_372,
                     ("deep_select", False): 48_253_887, ("deep_select", True): 48_163_989},
    gaps={"deep_select": "the seed's deep_select KV cache exceeds auto's by 9.996 GiB, of which the graph pools "
                         "explain 6.01 GiB; the other 3.99 GiB is in no released vLLM's profile run, and plan leaves "
                         "it out"},
)
PUBLISHED = (SEED,)


@dataclass(frozen=True)
class Gap:
    source: str
    backend: str
    reserves_decode_logits: bool  # the side of #62860 the figure is on
    published_tokens: int
    planned_tokens: int
    why: str | None

    @property
    def change(self) -> float:
        return self.planned_tokens / self.published_tokens - 1


def is_deployment(plan: Plan, published: Published) -> bool:
    recipe = plan.recipe
    graphs = {backend: round(value / GIB, 2) for backend, value in recipe.cudagraph_bytes.items()}
    return (recipe.vllm_version in published.versions and graphs == published.graphs_gib
            and all(recipe.shape.get(key) == value for key, value in published.deployment.items()))


def gaps(plan: Plan) -> list[Gap]:
    """Where plan's KV tokens for a published deployment are more than AGREES off the published figures."""
    found = []
    for published in PUBLISHED:
        if not is_deployment(plan, published):
            continue
        for b in plan.backends:
            for side in (b.release, b.other):
                figure = published.kv_cache_tokens.get((b.backend, side.reserves_decode_logits))
                if figure is not None and abs(side.kv_cache_tokens / figure - 1) > AGREES:
                    found.append(Gap(published.source, b.backend, side.reserves_decode_logits, figure,
                                     side.kv_cache_tokens, published.gaps.get(b.backend)))
    return found
