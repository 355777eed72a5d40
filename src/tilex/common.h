// tilex device helpers included by every generated kernel.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>

#include "tilex/copy_async.h"
#include "tilex/mma_sm80.h"
#include "tilex/wgmma_sm90.h"
#include "tilex/reduce.h"
#include "tilex/warp.h"
#include "tilex/builtin.h"
#include "tilex/fast_math.h"
#include "tilex/atomic.h"
#include "tilex/debug.h"
#include "tilex/tma.h"
#include "tilex/stream_k.h"
#include "tilex/lowbit.h"
#include "tilex/sub_byte.h"
#include "tilex/dequant.h"
#include "tilex/rng.h"
