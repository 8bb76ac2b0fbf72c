/* config.c: names for dtypes, for messages and plans. */
#include "kernels/config.h"

const char *rl_dtype_name(rlDtype t) {
    switch (t) {
    case RL_F32: return "fp32";
    case RL_F16: return "fp16";
    case RL_BF16: return "bf16";
    case RL_I32: return "int32";
    case RL_F8_E4M3: return "float8_e4m3fn";
    }
    return "?";
}
