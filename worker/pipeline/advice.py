"""What a job whose engine failed validation could change to pass, in words that fit it: a
wider precision only where the job's is not already the reference's (fp32 has none wider)."""

from collections.abc import Sequence

from core.job_config import JobConfig
from optimizer.registries.precisions import REFERENCE_PRECISION
from optimizer.validation import ValidationReport

__all__ = ["failure_advice"]


def failure_advice(config: JobConfig, report: ValidationReport, *, blamed: Sequence[str] = (),
                   blamed_passes: Sequence[str] = (), falls_back: bool = True) -> str:
    """What would make a failed job pass, fitting it: leave out the blamed rules' passes, fall
    back (where the job does not and could: `falls_back` False for a precision that is judged
    and never bisected), a wider precision (only where the job's is not already the
    reference's: fp32 has none wider), loosen the limits that failed."""
    steps = []
    if blamed:
        held = f"pass(es) {', '.join(blamed_passes)} (holding " if blamed_passes else ""
        steps.append(f"leave out {held}rule(s) {', '.join(blamed)}{')' if held else ''} by "
                     "listing the passes to keep in `passes`")
    if falls_back and config.on_validation_failure != "fallback":
        steps.append('set "on_validation_failure": "fallback" to ship the rewrites that '
                     "validate, or else the original model where the backend can")
    if config.precision != REFERENCE_PRECISION:
        steps.append(f"build at {REFERENCE_PRECISION} instead of {config.precision}")
    fixes = f"To pass, {'; or '.join(steps)}. " if steps else ""
    return fixes + report.loosen_advice()
