// The workloads of bench_simt.py in MSL. workloads.cl holds the same kernels in OpenCL C,
// line for line where OpenCL has the feature.
#include <metal_stdlib>
using namespace metal;

#define TILE 16

// Each threadgroup of 256 threads sums its 256 values by halving: 9 barriers per thread.
kernel void tree_reduce(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                        uint g [[threadgroup_position_in_grid]]) {
    threadgroup float tmp[256];
    tmp[l] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = 128; s > 0; s >>= 1) {
        if (l < s) tmp[l] += tmp[l + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (l == 0) out[g] = tmp[0];
}

// C = A * B for n x n row-major matrices, n a multiple of TILE; threadgroups of TILE x TILE.
// Each step stages one tile of A and one of B in threadgroup memory: two barriers per step.
kernel void matmul_tiled(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                         device float* c [[buffer(2)]], constant uint& n [[buffer(3)]],
                         uint2 gid [[thread_position_in_grid]],
                         uint2 tid [[thread_position_in_threadgroup]]) {
    threadgroup float as[TILE][TILE];
    threadgroup float bs[TILE][TILE];
    float acc = 0.0f;
    for (uint t = 0; t < n; t += TILE) {
        as[tid.y][tid.x] = a[gid.y * n + t + tid.x];
        bs[tid.y][tid.x] = b[(t + tid.y) * n + gid.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint k = 0; k < TILE; ++k) acc += as[tid.y][k] * bs[k][tid.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    c[gid.y * n + gid.x] = acc;
}

// One level, no barrier: each SIMD-group sums its lanes' values; lane 0 writes the sum.
kernel void simd_partials(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                          uint i [[thread_position_in_grid]],
                          uint lane [[thread_index_in_simdgroup]],
                          uint width [[threads_per_simdgroup]]) {
    float s = simd_sum(x[i]);
    if (lane == 0) out[i / width] = s;
}

// Two levels, one barrier: SIMD-group sums go through threadgroup memory to SIMD-group 0,
// which sums them again. Writes one sum per threadgroup, as tree_reduce does.
kernel void simd_reduce(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]], uint g [[threadgroup_position_in_grid]],
                        uint lane [[thread_index_in_simdgroup]],
                        uint sg [[simdgroup_index_in_threadgroup]],
                        uint groups [[simdgroups_per_threadgroup]]) {
    threadgroup float partial[32];
    float s = simd_sum(x[i]);
    if (lane == 0) partial[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        s = simd_sum(lane < groups ? partial[lane] : 0.0f);
        if (lane == 0) out[g] = s;
    }
}

// The smallest barrier kernel worth timing per call: one threadgroup of 64 threads reverses
// 64 values through threadgroup memory, which needs its one barrier.
kernel void reverse64(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                      uint l [[thread_position_in_threadgroup]]) {
    threadgroup float tmp[64];
    tmp[l] = x[l];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[l] = tmp[63 - l];
}
