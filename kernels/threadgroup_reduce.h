// Reductions over a whole threadgroup, for the kernels that give one threadgroup a row: a
// simd_* reduction in each SIMD-group, then each SIMD-group's result through `scratch` (32
// values of threadgroup memory, one per SIMD-group). Every thread of the threadgroup calls
// them and gets the result; the second barrier lets the caller reuse `scratch` at once.
#pragma once
#include <metal_stdlib>
using namespace metal;

struct GroupIds {
    uint sg;    // [[simdgroup_index_in_threadgroup]]
    uint lane;  // [[thread_index_in_simdgroup]]
    uint nsg;   // [[simdgroups_per_threadgroup]]
};

inline float group_sum(float v, threadgroup float* scratch, GroupIds ids) {
    v = simd_sum(v);
    if (ids.lane == 0) scratch[ids.sg] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint i = 0; i < ids.nsg; i++) total += scratch[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return total;
}

inline float group_max(float v, threadgroup float* scratch, GroupIds ids) {
    v = simd_max(v);
    if (ids.lane == 0) scratch[ids.sg] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float best = -INFINITY;
    for (uint i = 0; i < ids.nsg; i++) best = max(best, scratch[i]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return best;
}
