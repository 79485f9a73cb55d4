// Attention for decode over a paged KV cache. The cache is a pool of fixed-size blocks,
// k_cache and v_cache [num_blocks, block_size, Hkv, D]; a sequence's tokens live in the blocks
// its row of block_tables lists, token j at slot j % block_size of block
// block_tables[b, j / block_size], so sequences grow a block at a time and share one pool.
#include <metal_stdlib>
using namespace metal;

#define MAX_HEAD_DIM 128

// Writes new tokens' keys and values into their slots: k, v [T, Hkv * D] go to cache rows
// slots[t] (= block * block_size + offset). Launch: grid = (Hkv * D, T).
kernel void paged_kv_write(device const float* k [[buffer(0)]],
                           device const float* v [[buffer(1)]],
                           device float* k_cache [[buffer(2)]], device float* v_cache [[buffer(3)]],
                           device const int* slots [[buffer(4)]],
                           constant uint& width [[buffer(5)]],
                           uint2 p [[thread_position_in_grid]]) {
    const uint dst = uint(slots[p.y]) * width + p.x, src = p.y * width + p.x;
    k_cache[dst] = k[src];
    v_cache[dst] = v[src];
}

// Split-K ("flash-decoding"): the context of each sequence is cut into partitions of
// partition_size tokens, and one thread per (query head, partition, sequence) runs the online
// softmax of attention_prefill.metal over its partition alone, so a long context is spread over
// many threads. Neighbouring threads take neighbouring heads of the same tokens, whose keys and
// values lie side by side in the cache (heads sharing a key/value head read the same ones).
// Each writes its unnormalised partial result: part_acc [B, Hq, P, D], its max part_max and
// its sum part_sum [B, Hq, P]; an empty partition writes (-inf, 0, zeros).
// q [B, Hq, D]; block_tables [B, max_blocks]; context_lens [B] (each at least 1).
// Launch: grid = (Hq, P, B).
kernel void paged_attention(device const float* q [[buffer(0)]],
                            device const float* k_cache [[buffer(1)]],
                            device const float* v_cache [[buffer(2)]],
                            device const int* block_tables [[buffer(3)]],
                            device const int* context_lens [[buffer(4)]],
                            device float* part_acc [[buffer(5)]],
                            device float* part_max [[buffer(6)]],
                            device float* part_sum [[buffer(7)]],
                            constant uint& Hq [[buffer(8)]], constant uint& Hkv [[buffer(9)]],
                            constant uint& D [[buffer(10)]],
                            constant uint& block_size [[buffer(11)]],
                            constant uint& max_blocks [[buffer(12)]],
                            constant uint& partition_size [[buffer(13)]],
                            constant float& scale [[buffer(14)]],
                            uint3 p [[thread_position_in_grid]],
                            uint3 grid [[threads_per_grid]]) {
    const uint h = p.x, part = p.y, b = p.z, parts = grid.y, d4 = D / 4;
    const uint kv_head = h / (Hq / Hkv);
    const uint out = (b * Hq + h) * parts + part;
    device float4* acc_out = (device float4*)(part_acc + out * D);
    const uint len = uint(context_lens[b]);
    const uint start = part * partition_size, end = min(start + partition_size, len);
    device const float4* qrow = (device const float4*)(q + (b * Hq + h) * D);
    float4 qs[MAX_HEAD_DIM / 4], acc[MAX_HEAD_DIM / 4];
    for (uint i = 0; i < d4; i++) {
        qs[i] = qrow[i] * scale;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    device const int* table = block_tables + b * max_blocks;
    for (uint j = start; j < end; j++) {
        const uint slot = uint(table[j / block_size]) * block_size + j % block_size;
        const uint row = slot * Hkv + kv_head;
        device const float4* krow = (device const float4*)(k_cache + row * D);
        device const float4* vrow = (device const float4*)(v_cache + row * D);
        float4 dots = 0.0f;
        for (uint i = 0; i < d4; i++) dots += qs[i] * krow[i];
        const float s = dots.x + dots.y + dots.z + dots.w;
        if (s > m) {
            const float r = exp(m - s);
            l *= r;
            for (uint i = 0; i < d4; i++) acc[i] *= r;
            m = s;
        }
        const float w = exp(s - m);
        l += w;
        for (uint i = 0; i < d4; i++) acc[i] += w * vrow[i];
    }
    for (uint i = 0; i < d4; i++) acc_out[i] = acc[i];
    part_max[out] = m;
    part_sum[out] = l;
}

// Combines the partitions: with M the largest partition max, out = sum_p part_acc[p] *
// exp(m_p - M) / sum_p part_sum[p] * exp(m_p - M). out [B, Hq, D]; P partitions.
// Launch: grid = (D, B * Hq).
kernel void paged_attention_reduce(device const float* part_acc [[buffer(0)]],
                                   device const float* part_max [[buffer(1)]],
                                   device const float* part_sum [[buffer(2)]],
                                   device float* out [[buffer(3)]], constant uint& P [[buffer(4)]],
                                   constant uint& D [[buffer(5)]],
                                   uint2 p [[thread_position_in_grid]]) {
    const uint d = p.x, head = p.y;
    device const float* maxes = part_max + head * P;
    device const float* sums = part_sum + head * P;
    float M = -INFINITY;
    for (uint i = 0; i < P; i++) M = max(M, maxes[i]);
    float num = 0.0f, den = 0.0f;
    for (uint i = 0; i < P; i++) {
        if (maxes[i] == -INFINITY) continue;  // an empty partition
        const float r = exp(maxes[i] - M);
        num += part_acc[(head * P + i) * D + d] * r;
        den += sums[i] * r;
    }
    out[head * D + d] = num / den;
}
