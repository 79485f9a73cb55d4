// Matrix products of the linear layers: C[M, N] = A[M, K] @ B[N, K]^T. B is laid out as a
// linear layer stores its weights, one row of K inputs per output, so both operands are read
// along K, the contiguous direction.
#include <metal_stdlib>
using namespace metal;

// Register tiling. Each thread owns a 4x4 tile of C in registers and reads its 4 rows of A
// and 4 rows of B once per step of 4 along K: 16 float4 products for 8 loads. The 8x8 threads
// of a threadgroup cover a 32x32 block of C; the rows they share come from the GPU's cache,
// with no threadgroup memory and no barriers (on metalkit's simulator, it runs as a loop).
// Launch: grid = (ceil(N / 4), ceil(M / 4)), threadgroup = (8, 8).
kernel void matmul_tiled(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                         device float* C [[buffer(2)]], constant uint& M [[buffer(3)]],
                         constant uint& N [[buffer(4)]], constant uint& K [[buffer(5)]],
                         uint2 p [[thread_position_in_grid]]) {
    const uint r0 = p.y * 4, c0 = p.x * 4;
    if (r0 >= M || c0 >= N) return;
    device const float* a[4];
    device const float* b[4];
    for (uint i = 0; i < 4; i++) {  // rows past an edge repeat the last row; they are not stored
        a[i] = A + min(r0 + i, M - 1) * K;
        b[i] = B + min(c0 + i, N - 1) * K;
    }
    float4 acc[4][4];
    for (uint i = 0; i < 4; i++)
        for (uint j = 0; j < 4; j++) acc[i][j] = 0.0f;
    uint k = 0;
    for (; k + 4 <= K; k += 4) {  // packed loads: a row of odd K starts at any float
        float4 av[4], bv[4];
        for (uint i = 0; i < 4; i++) {
            av[i] = float4(*(device const packed_float4*)(a[i] + k));
            bv[i] = float4(*(device const packed_float4*)(b[i] + k));
        }
        for (uint i = 0; i < 4; i++)
            for (uint j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
    }
    float s[4][4];
    for (uint i = 0; i < 4; i++)
        for (uint j = 0; j < 4; j++)
            s[i][j] = acc[i][j].x + acc[i][j].y + acc[i][j].z + acc[i][j].w;
    for (; k < K; k++)  // the last K % 4 columns
        for (uint i = 0; i < 4; i++)
            for (uint j = 0; j < 4; j++) s[i][j] += a[i][k] * b[j][k];
    for (uint i = 0; i < 4 && r0 + i < M; i++)
        for (uint j = 0; j < 4 && c0 + j < N; j++) C[(r0 + i) * N + c0 + j] = s[i][j];
}

// The matrix units. Each SIMD-group computes one 8x8 tile of C with simdgroup_float8x8
// multiply-accumulates; the 4 SIMD-groups of a threadgroup (128 threads) cover a 16x16 block.
// A tile inside the matrices is loaded straight from device memory (B^T by a transposed load);
// at the edges, the 32 lanes stage an 8x8 tile of A and one of B^T in the SIMD-group's own
// threadgroup memory, zero past the edges, so any M, N, K work; the result goes out the same
// way. Launch: threadgroups = (ceil(N / 16), ceil(M / 16)), threadgroup = 128.
kernel void matmul_simdgroup(device const float* A [[buffer(0)]],
                             device const float* B [[buffer(1)]], device float* C [[buffer(2)]],
                             constant uint& M [[buffer(3)]], constant uint& N [[buffer(4)]],
                             constant uint& K [[buffer(5)]],
                             uint2 group [[threadgroup_position_in_grid]],
                             uint sg [[simdgroup_index_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float a_tiles[4][64];
    threadgroup float b_tiles[4][64];
    threadgroup float* at = a_tiles[sg];
    threadgroup float* bt = b_tiles[sg];
    const uint row0 = group.y * 16 + (sg / 2) * 8, col0 = group.x * 16 + (sg % 2) * 8;
    const bool inside = row0 + 8 <= M && col0 + 8 <= N;  // the same for the whole SIMD-group
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint k0 = 0; k0 < K; k0 += 8) {
        simdgroup_float8x8 a, b;
        if (inside && k0 + 8 <= K) {
            simdgroup_load(a, A + row0 * K + k0, K);
            simdgroup_load(b, B + col0 * K + k0, K, ulong2(0), true);  // b[r][c] = B[col0 + c][k0 + r]
        } else {
            for (uint e = lane; e < 64; e += 32) {
                const uint r = e / 8, c = e % 8;
                // at[r][c] = A[row0 + r][k0 + c]; bt[r][c] = B^T[k0 + r][col0 + c]
                at[e] = row0 + r < M && k0 + c < K ? A[(row0 + r) * K + k0 + c] : 0.0f;
                bt[e] = col0 + c < N && k0 + r < K ? B[(col0 + c) * K + k0 + r] : 0.0f;
            }
            simdgroup_barrier(mem_flags::mem_threadgroup);
            simdgroup_load(a, at, 8);
            simdgroup_load(b, bt, 8);
            simdgroup_barrier(mem_flags::mem_threadgroup);
        }
        simdgroup_multiply_accumulate(acc, a, b, acc);
    }
    if (inside) {
        simdgroup_store(acc, C + row0 * N + col0, N);
        return;
    }
    simdgroup_store(acc, at, 8);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    for (uint e = lane; e < 64; e += 32) {
        const uint r = e / 8, c = e % 8;
        if (row0 + r < M && col0 + c < N) C[(row0 + r) * N + col0 + c] = at[e];
    }
}
