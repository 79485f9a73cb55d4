// Matrix-vector products on weights quantised in GGUF's block layouts: each row of K weights
// is K / 32 blocks of 32, each block one half-precision scale d and 32 small integers q, the
// weight being q * d. The weights are dequantised as they are read and the vectors stay
// float32: y[b, n] = sum over blocks of d * dot(q, x[b, block]). As in matvec.metal, one thread
// per row and group of up to 4 vectors, each block unpacked once for all of them.
// Launch: grid = (N, ceil(B / 4)).
#include <metal_stdlib>
using namespace metal;

// Q8_0: 34 bytes, the scale then 32 signed bytes.
struct block_q8_0 {
    half d;
    char qs[32];
};

// Q4_0: 18 bytes, the scale then 16 bytes of 4-bit values stored with 8 added: the low nibble
// of qs[j] is element j, the high nibble element j + 16.
struct block_q4_0 {
    half d;
    uchar qs[16];
};

// A block's 32 integers, as floats (the scale applies to their dot product).
inline void unpack(device const block_q8_0& b, thread float4* w) {
    for (uint j = 0; j < 8; j++) w[j] = float4(char4(*(device const packed_char4*)(b.qs + 4 * j)));
}

inline void unpack(device const block_q4_0& b, thread float4* w) {
    for (uint j = 0; j < 4; j++) {
        const uchar4 q = uchar4(*(device const packed_uchar4*)(b.qs + 4 * j));
        w[j] = float4(q & uchar4(15)) - 8.0f;       // elements 4j .. 4j + 3
        w[j + 4] = float4(q >> uchar4(4)) - 8.0f;   // elements 16 + 4j .. 16 + 4j + 3
    }
}

// Row `row` (K / 32 blocks) against NV vectors x[j * K ...]; results to y[j * N]. NV is a
// template parameter so that the sums stay in registers.
template <typename Block, uint NV>
inline void row_times_vectors(device const Block* row, device const float* x, device float* y,
                              uint N, uint K) {
    float s[NV];
    for (uint j = 0; j < NV; j++) s[j] = 0.0f;
    for (uint i = 0; i < K / 32; i++) {
        float4 w[8];
        unpack(row[i], w);
        const float d = float(row[i].d);
        for (uint j = 0; j < NV; j++) {
            device const float4* v = (device const float4*)(x + j * K) + i * 8;  // K % 32 == 0
            float4 acc = 0.0f;
            for (uint e = 0; e < 8; e++) acc += w[e] * v[e];
            s[j] += d * (acc.x + acc.y + acc.z + acc.w);
        }
    }
    for (uint j = 0; j < NV; j++) y[j * N] = s[j];
}

template <typename Block>
inline void quantised_matvec(device const Block* W, device const float* x, device float* y,
                             uint N, uint K, uint B, uint2 p) {
    const uint n = p.x, b0 = p.y * 4;
    if (n >= N || b0 >= B) return;
    device const Block* row = W + n * (K / 32);
    device const float* v = x + b0 * K;
    device float* out = y + b0 * N + n;
    switch (min(4u, B - b0)) {
        case 1: row_times_vectors<Block, 1>(row, v, out, N, K); break;
        case 2: row_times_vectors<Block, 2>(row, v, out, N, K); break;
        case 3: row_times_vectors<Block, 3>(row, v, out, N, K); break;
        default: row_times_vectors<Block, 4>(row, v, out, N, K); break;
    }
}

kernel void matvec_q8_0(device const block_q8_0* W [[buffer(0)]],
                        device const float* x [[buffer(1)]], device float* y [[buffer(2)]],
                        constant uint& N [[buffer(3)]], constant uint& K [[buffer(4)]],
                        constant uint& B [[buffer(5)]], uint2 p [[thread_position_in_grid]]) {
    quantised_matvec(W, x, y, N, K, B, p);
}

kernel void matvec_q4_0(device const block_q4_0* W [[buffer(0)]],
                        device const float* x [[buffer(1)]], device float* y [[buffer(2)]],
                        constant uint& N [[buffer(3)]], constant uint& K [[buffer(4)]],
                        constant uint& B [[buffer(5)]], uint2 p [[thread_position_in_grid]]) {
    quantised_matvec(W, x, y, N, K, B, p);
}
