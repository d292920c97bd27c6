"""Step 4 of an RL step: what a finished trajectory is worth.

The default is rStar2's math reward: the last ``\\boxed{}`` of the last ``<answer>``
block (``_answer``), right when our comparer (``_normalise``, ``_compare`` with
``_numbers`` and ``_intervals``) or math-verify (in killable worker processes,
``_worker``) says it equals the gold answer.  Evaluation of outside models may grade
leniently (``_lenient``: an answer written without a box is read from free text).  A
run may bring its own :data:`RewardFunction` (``[reward] function = "pkg.module:fn"``,
``_function``) with the same timeout and worker guarantees (``_grader``).  The engine
calls any :class:`Reward`; :class:`Grader` is the one shipped.
"""

from ..errors import GraderBrokenError
from ._answer import AnswerFormat, answer_format, extract_answer
from ._compare import LENIENT_REL_TOL, GradingMode, answers_match
from ._function import Reward, RewardFunction
from ._grader import Grader, GraderStatistics
from ._lenient import final_answer
from ._normalise import MAX_ANSWER_CHARS, normalize_answer
from ._score import GRADING_TIMEOUT_S, score
from ._worker import WORKER_START_TIMEOUT_S

__all__ = [
    "AnswerFormat",
    "GRADING_TIMEOUT_S",
    "Grader",
    "GraderBrokenError",
    "GraderStatistics",
    "GradingMode",
    "LENIENT_REL_TOL",
    "MAX_ANSWER_CHARS",
    "Reward",
    "RewardFunction",
    "WORKER_START_TIMEOUT_S",
    "answer_format",
    "answers_match",
    "extract_answer",
    "final_answer",
    "normalize_answer",
    "score",
]
