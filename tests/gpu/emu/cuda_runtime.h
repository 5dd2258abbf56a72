/* cuda_runtime.h — stands in for the CUDA header of that name in the CPU emulation (cuda_emu.h). */
#include "cuda_emu.h"
