"""What the attention programs share: unit constants, the torch -> tile dtype names, and the online-softmax step."""
import tilex.language as T

LOG2E = 1.4426950408889634  # scores are kept in base 2: exp(x) = 2^(x log2 e)
LN2 = 0.6931471805599453
#: torch dtype (as str) -> the tile programs' dtype name, for the 16-bit inputs the programs take.
TORCH_DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16"}


@T.macro
def online_softmax(acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev, scores_scale, scores_sum, logsum, scale,
                   bm, bn, dim):
    # One key block of the online softmax (base 2, `scale` = sm_scale * log2 e): the running row max, the factor
    # that rescales what came before, P = 2^(S * scale - max) cast for P V, the running row sums, and the
    # rescaled output accumulator.
    T.copy(scores_max, scores_max_prev)
    T.fill(scores_max, -T.infinity(scores_max.dtype))
    T.reduce_max(acc_s, scores_max, dim=1, clear=False)
    for i in T.Parallel(bm):
        scores_max[i] = T.max(scores_max[i], scores_max_prev[i])
    for i in T.Parallel(bm):
        scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
    for i, j in T.Parallel(bm, bn):
        acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
    T.reduce_sum(acc_s, scores_sum, dim=1)
    for i in T.Parallel(bm):
        logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
    T.copy(acc_s, acc_s_cast)
    for i, j in T.Parallel(bm, dim):
        acc_o[i, j] *= scores_scale[i]
