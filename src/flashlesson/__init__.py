"""flashlesson — lesson 22 ("why softmax is hard to make fast, and how FlashAttention cuts memory
traffic") as ``numba.cuda`` kernels, each checked against a NumPy float64 oracle.

Importing this package chooses where kernels run (the GPU, or Numba's CUDA simulator on the CPU)
before Numba's CUDA target loads, silently; the first kernel launch says once which one it is
(on stderr). See ``flashlesson.device``.
"""

import os as _os

# The kernels, the oracles and the examples are subpackages: ``flashlesson.kernels_numba``,
# ``flashlesson.reference`` and ``flashlesson.examples``. The wheel installs them inside this
# package (setup.cfg's package_dir); in a source checkout they are the folders beside ``src/``,
# found through this package's search path, so that both read the same names.
_checkout = _os.path.dirname(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))
if (not _os.path.isdir(_os.path.join(__path__[0], "kernels_numba"))
        and _os.path.isfile(_os.path.join(_checkout, "kernels_numba", "__init__.py"))):
    __path__.append(_checkout)

from . import device  # noqa: E402, I001 - before any kernel: it sets NUMBA_ENABLE_CUDASIM if needed

from .device import DeviceError, MODE, SIMULATOR  # noqa: E402
from .softmax_methods import METHODS as SOFTMAX_METHODS, choose as choose_softmax, softmax  # noqa: E402
from .configs import BwdConfig, FlashConfig, LessonConfig  # noqa: E402
from .attention_methods import METHODS as ATTENTION_METHODS, attention, merge_attention, varlen_attention  # noqa: E402
from .tc_methods import BFloat16, TcBwdConfig, TcConfig, WgmmaBwdConfig, WgmmaConfig, \
    WgmmaTf32BwdConfig, WgmmaTf32Config  # noqa: E402
from .backward_methods import attention_backward, varlen_attention_backward  # noqa: E402
from .dropout import dropout_keep_mask  # noqa: E402
from .linear_methods import LinearConfig, linear_attention  # noqa: E402

__version__ = "1.0.0"
__all__ = ["softmax", "choose_softmax", "SOFTMAX_METHODS", "attention", "merge_attention",
           "varlen_attention", "attention_backward", "varlen_attention_backward", "BwdConfig",
           "FlashConfig", "LessonConfig", "TcConfig", "TcBwdConfig", "WgmmaConfig", "WgmmaBwdConfig", "WgmmaTf32Config",
           "WgmmaTf32BwdConfig", "BFloat16", "ATTENTION_METHODS",
           "DeviceError", "MODE", "SIMULATOR",
           "dropout_keep_mask", "linear_attention", "LinearConfig"]
