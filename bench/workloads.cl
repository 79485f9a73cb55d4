// The OpenCL C kernels of bench/: the workloads of bench_simt.py, the same kernels as
// workloads.metal, and those of bench_add.py.
// simd_* need sub-groups, which OpenCL C has only with cl_khr_subgroups or __opencl_c_subgroups.

#define TILE 16

// Each work-group of 256 work-items sums its 256 values by halving: 9 barriers per item.
__kernel void tree_reduce(__global const float* x, __global float* out) {
    __local float tmp[256];
    uint i = get_global_id(0), l = get_local_id(0);
    tmp[l] = x[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = 128; s > 0; s >>= 1) {
        if (l < s) tmp[l] += tmp[l + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (l == 0) out[get_group_id(0)] = tmp[0];
}

// C = A * B for n x n row-major matrices, n a multiple of TILE; work-groups of TILE x TILE.
__kernel void matmul_tiled(__global const float* a, __global const float* b,
                           __global float* c, uint n) {
    __local float as[TILE][TILE];
    __local float bs[TILE][TILE];
    uint gx = get_global_id(0), gy = get_global_id(1);
    uint tx = get_local_id(0), ty = get_local_id(1);
    float acc = 0.0f;
    for (uint t = 0; t < n; t += TILE) {
        as[ty][tx] = a[gy * n + t + tx];
        bs[ty][tx] = b[(t + ty) * n + gx];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint k = 0; k < TILE; ++k) acc += as[ty][k] * bs[k][tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    c[gy * n + gx] = acc;
}

__kernel void add_arrays(__global const float* a, __global const float* b, __global float* out) {
    size_t i = get_global_id(0);
    out[i] = a[i] + b[i];
}

#if defined(cl_khr_subgroups) || defined(__opencl_c_subgroups)

// One level, no barrier: each sub-group sums its work-items' values; the first writes the sum.
// A sub-group is as wide as a SIMD-group of metalkit (32) only where that width can be required.
#ifdef cl_intel_required_subgroup_size
__attribute__((intel_reqd_sub_group_size(32)))
__kernel void simd_partials(__global const float* x, __global float* out) {
    uint i = get_global_id(0);
    float s = sub_group_reduce_add(x[i]);
    if (get_sub_group_local_id() == 0) out[i / 32] = s;
}
#endif

// Two levels, one barrier: sub-group sums go through local memory to sub-group 0, which sums
// them again. Writes one sum per work-group of 256, as tree_reduce does, whatever the
// sub-group size the compiler picks (partial has room for sub-groups of one).
__kernel void simd_reduce(__global const float* x, __global float* out) {
    __local float partial[256];
    float s = sub_group_reduce_add(x[get_global_id(0)]);
    uint sg = get_sub_group_id(), lane = get_sub_group_local_id();
    if (lane == 0) partial[sg] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (sg == 0) {
        s = 0.0f;
        for (uint k = lane; k < get_num_sub_groups(); k += get_sub_group_size()) s += partial[k];
        s = sub_group_reduce_add(s);
        if (lane == 0) out[get_group_id(0)] = s;
    }
}

#endif

// One work-group of 64 work-items reverses 64 values through local memory.
__kernel void reverse64(__global const float* x, __global float* out) {
    __local float tmp[64];
    uint l = get_local_id(0);
    tmp[l] = x[l];
    barrier(CLK_LOCAL_MEM_FENCE);
    out[l] = tmp[63 - l];
}

// bench_add.py: the per-call cost of a one-work-item kernel.
__kernel void touch(__global float* x) { x[get_global_id(0)] += 1.0f; }
