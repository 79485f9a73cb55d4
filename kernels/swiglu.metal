// The gate of a SwiGLU MLP: out = silu(gate) * up = gate / (1 + exp(-gate)) * up, elementwise.
// Launch: one thread per element (the default grid).
#include <metal_stdlib>
using namespace metal;

kernel void swiglu(device const float* gate [[buffer(0)]], device const float* up [[buffer(1)]],
                   device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    const float g = gate[i];
    out[i] = g / (1.0f + exp(-g)) * up[i];
}
