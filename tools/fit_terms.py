"""Regenerates dsa_kvcalc/fits.json: the activation peak and non-torch memory fitted to every usable startup record
(dsa_kvcalc/fits.py explains the model; docs/fits.md where the data came from).

    python tools/fit_terms.py          # writes the fit, prints its points and residuals
    python tools/fit_terms.py --check  # exits 1 where fits.json is not what the records give
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsa_kvcalc import fits, fitting  # noqa: E402
from dsa_kvcalc.records import RECORDS  # noqa: E402
from dsa_kvcalc.units import GIB  # noqa: E402


def main() -> int:
    points = [fitting.point(r) for r in fits.fitted_records(RECORDS)]
    fitted = fits.fit(points)
    weights = fits.spread(fitting.weights_residuals(RECORDS))
    graphs = fits.spread(fitting.graphs_residuals(RECORDS))
    text = fits.as_json(fitted, points, weights, graphs)
    if "--check" in sys.argv:
        return 0 if fits.DATA_PATH.read_text() == text else 1
    fits.DATA_PATH.write_text(text)
    print(f"hidden copies {fitted.hidden_copies:.2f}, non-torch {fitted.non_torch_single_bytes / GIB:.2f} GiB + "
          f"{fitted.non_torch_collectives_bytes / GIB:.2f} GiB with collectives")
    for name, residual in fitted.residuals.items():
        print(f"  {residual / GIB:+.2f} GiB  {name}")
    print(f"weights derived vs logged: within {weights.spread:.2%}")
    for name, residual in weights.residuals.items():
        print(f"  {residual:+.2%}  {name}")
    print(f"graph estimate vs logged: within {graphs.spread / GIB:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
