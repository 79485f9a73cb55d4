// Matrix-vector products on weights quantised in GGUF's block layouts: each row of K weights
// is K / 32 blocks of 32, each block one half-precision scale d and 32 small integers q, the
// weight being q * d. The weights are dequantised as they are read and the vector stays
// float32: y[b, n] = sum over blocks of d * dot(q, x[b, block]). As in matvec.metal, one thread
// per row and group of up to 4 vectors, each block unpacked once for all of them.
// Launch: grid = (N, ceil(B / 4)).
#include <metal_stdlib>
using namespace metal;

#define VECTORS 4

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

kernel void matvec_q8_0(device const block_q8_0* W [[buffer(0)]],
                        device const float* x [[buffer(1)]], device float* y [[buffer(2)]],
                        constant uint& N [[buffer(3)]], constant uint& K [[buffer(4)]],
                        constant uint& B [[buffer(5)]], uint2 p [[thread_position_in_grid]]) {
    const uint n = p.x, b0 = p.y * VECTORS;
    if (n >= N || b0 >= B) return;
    const uint nv = min(uint(VECTORS), B - b0), blocks = K / 32;
    device const block_q8_0* row = W + n * blocks;
    float s[VECTORS] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (uint i = 0; i < blocks; i++) {
        float4 w[8];  // the block's 32 integers (the scale applies to their dot product)
        for (uint j = 0; j < 8; j++)
            w[j] = float4(char4(*(device const packed_char4*)(row[i].qs + 4 * j)));
        const float d = float(row[i].d);
        for (uint b = 0; b < nv; b++) {
            device const float4* v = (device const float4*)(x + (b0 + b) * K) + i * 8;  // aligned
            float4 acc = 0.0f;
            for (uint j = 0; j < 8; j++) acc += w[j] * v[j];
            s[b] += d * (acc.x + acc.y + acc.z + acc.w);
        }
    }
    for (uint b = 0; b < nv; b++) y[(b0 + b) * N + n] = s[b];
}

kernel void matvec_q4_0(device const block_q4_0* W [[buffer(0)]],
                        device const float* x [[buffer(1)]], device float* y [[buffer(2)]],
                        constant uint& N [[buffer(3)]], constant uint& K [[buffer(4)]],
                        constant uint& B [[buffer(5)]], uint2 p [[thread_position_in_grid]]) {
    const uint n = p.x, b0 = p.y * VECTORS;
    if (n >= N || b0 >= B) return;
    const uint nv = min(uint(VECTORS), B - b0), blocks = K / 32;
    device const block_q4_0* row = W + n * blocks;
    float s[VECTORS] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (uint i = 0; i < blocks; i++) {
        float4 w[8];  // elements 0..15 from the low nibbles, 16..31 from the high ones
        for (uint j = 0; j < 4; j++) {
            const uchar4 q = uchar4(*(device const packed_uchar4*)(row[i].qs + 4 * j));
            w[j] = float4(q & uchar4(15)) - 8.0f;
            w[j + 4] = float4(q >> uchar4(4)) - 8.0f;
        }
        const float d = float(row[i].d);
        for (uint b = 0; b < nv; b++) {
            device const float4* v = (device const float4*)(x + (b0 + b) * K) + i * 8;
            float4 acc = 0.0f;
            for (uint j = 0; j < 8; j++) acc += w[j] * v[j];
            s[b] += d * (acc.x + acc.y + acc.z + acc.w);
        }
    }
    for (uint b = 0; b < nv; b++) y[(b0 + b) * N + n] = s[b];
}
