// RMSNorm: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w, one threadgroup per row of D
// values. Launch: threadgroups = R, threadgroup = up to 1024 threads (a multiple of 32).
#include "threadgroup_reduce.h"

kernel void rms_norm(device const float* x [[buffer(0)]], device const float* w [[buffer(1)]],
                     device float* out [[buffer(2)]], constant uint& D [[buffer(3)]],
                     constant float& eps [[buffer(4)]],
                     uint row [[threadgroup_position_in_grid]],
                     uint l [[thread_position_in_threadgroup]],
                     uint width [[threads_per_threadgroup]],
                     uint sg [[simdgroup_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]],
                     uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float scratch[32];
    device const float* v = x + row * D;
    float ss = 0.0f;
    for (uint i = l; i < D; i += width) ss += v[i] * v[i];
    ss = group_sum(ss, scratch, GroupIds{sg, lane, nsg});
    const float scale = 1.0f / sqrt(ss / float(D) + eps);
    for (uint i = l; i < D; i += width) out[row * D + i] = v[i] * scale * w[i];
}
