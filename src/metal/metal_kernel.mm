// A kernel's compute pipeline, and its KernelSpec from pipeline reflection
// (core/reflection.h turns the reflected bindings into ArgSpecs).
// Metal APIs: newComputePipelineStateWithFunction:options:reflection:error:
// with MTLPipelineOptionBindingInfo (MTLPipelineOptionArgumentInfo before the
// macOS 15 SDK); reflection.bindings and MTLBinding / MTLBufferBinding /
// MTLThreadgroupBinding (macOS 13), reflection.arguments and MTLArgument before
// macOS 13; maxTotalThreadsPerThreadgroup, staticThreadgroupMemoryLength (macOS
// 10.13); MTLDataTypeBFloat (macOS 14).
#include "../core/errors.h"
#include "metal_internal.h"

namespace mk {

void element_type(MTLDataType type, int* mk_type, int* vec_width) {
#define MK_VECTORS(T, MK)                       \
  case MTLDataType##T: *mk_type = MK; *vec_width = 1; return;    \
  case MTLDataType##T##2: *mk_type = MK; *vec_width = 2; return; \
  case MTLDataType##T##3: *mk_type = MK; *vec_width = 3; return; \
  case MTLDataType##T##4: *mk_type = MK; *vec_width = 4; return;
  switch (type) {
    MK_VECTORS(Bool, MK_T_BOOL)
    MK_VECTORS(Char, MK_T_I8)
    MK_VECTORS(UChar, MK_T_U8)
    MK_VECTORS(Short, MK_T_I16)
    MK_VECTORS(UShort, MK_T_U16)
    MK_VECTORS(Int, MK_T_I32)
    MK_VECTORS(UInt, MK_T_U32)
    MK_VECTORS(Long, MK_T_I64)
    MK_VECTORS(ULong, MK_T_U64)
    MK_VECTORS(Half, MK_T_F16)
    MK_VECTORS(BFloat, MK_T_BF16)
    MK_VECTORS(Float, MK_T_F32)
    default: *mk_type = MK_T_STRUCT; *vec_width = 1; return;
  }
#undef MK_VECTORS
}

namespace {

// One request serves both reflections. The macOS 15 SDK renamed
// MTLPipelineOptionArgumentInfo (deprecated from macOS 13) to
// MTLPipelineOptionBindingInfo, keeping its bit; older SDKs have only the old name.
#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
constexpr MTLPipelineOption kReflectBindings = MTLPipelineOptionBindingInfo;
#else
constexpr MTLPipelineOption kReflectBindings = MTLPipelineOptionArgumentInfo;
#endif

std::vector<ReflectedBinding> from_bindings(NSArray<id<MTLBinding>>* bindings) API_AVAILABLE(macos(13.0)) {
  std::vector<ReflectedBinding> out;
  for (id<MTLBinding> binding in bindings) {
    ReflectedBinding r;
    r.index = int(binding.index);
    r.name = std_string(binding.name);
    if (binding.type == MTLBindingTypeBuffer) {
      id<MTLBufferBinding> buffer = (id<MTLBufferBinding>)binding;
      element_type(buffer.bufferDataType, &r.elem_type, &r.vec_width);
      r.size = buffer.bufferDataSize;
      r.align = buffer.bufferAlignment;
      r.writable = binding.access != MTLBindingAccessReadOnly;
    } else if (binding.type == MTLBindingTypeThreadgroupMemory) {
      id<MTLThreadgroupBinding> memory = (id<MTLThreadgroupBinding>)binding;
      r.type = ReflectedBinding::Type::Threadgroup;
      r.size = memory.threadgroupMemoryDataSize;
      r.align = memory.threadgroupMemoryAlignment;
      r.writable = true;
    } else {
      r.type = ReflectedBinding::Type::Other;
      r.other = binding.type == MTLBindingTypeTexture   ? "texture"
                : binding.type == MTLBindingTypeSampler ? "sampler" : "non-buffer";
    }
    out.push_back(std::move(r));
  }
  return out;
}

// The same from argument reflection, for macOS before 13. Apple deprecated it in
// macOS 13, so the compiler warns here only once the deployment target reaches
// 13: then this function and its @available branch below can go.
std::vector<ReflectedBinding> from_arguments(NSArray<MTLArgument*>* arguments) {
  std::vector<ReflectedBinding> out;
  for (MTLArgument* argument in arguments) {
    ReflectedBinding r;
    r.index = int(argument.index);
    r.name = std_string(argument.name);
    if (argument.type == MTLArgumentTypeBuffer) {
      element_type(argument.bufferDataType, &r.elem_type, &r.vec_width);
      r.size = argument.bufferDataSize;
      r.align = argument.bufferAlignment;
      r.writable = argument.access != MTLArgumentAccessReadOnly;
    } else if (argument.type == MTLArgumentTypeThreadgroupMemory) {
      r.type = ReflectedBinding::Type::Threadgroup;
      r.size = argument.threadgroupMemoryDataSize;
      r.align = argument.threadgroupMemoryAlignment;
      r.writable = true;
    } else {
      r.type = ReflectedBinding::Type::Other;
      r.other = argument.type == MTLArgumentTypeTexture ? "texture"
                : argument.type == MTLArgumentTypeSampler ? "sampler" : "non-buffer";
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

MetalKernel::MetalKernel(MetalDevice& dev, id<MTLComputePipelineState> pipeline, KernelSpec spec)
    : dev_(dev), pipeline_(pipeline), static_threadgroup_memory_(pipeline.staticThreadgroupMemoryLength) {
  spec_ = std::move(spec);
}

std::shared_ptr<KernelImpl> make_metal_kernel(MetalDevice& dev, id<MTLFunction> function, const std::string& name,
                                              const KernelDecl* declared, const std::string& file) {
  id<MTLComputePipelineState> pipeline;
  std::vector<ReflectedBinding> bindings;
  std::string error;
  @autoreleasepool {
    NSError* failure = nil;
    MTLAutoreleasedComputePipelineReflection reflection = nil;
    pipeline = [dev.device newComputePipelineStateWithFunction:function
                                                       options:kReflectBindings
                                                    reflection:&reflection
                                                         error:&failure];
    if (!pipeline) {
      error = error_text(failure, "Metal could not build its pipeline");
    } else if (@available(macOS 13.0, *)) {
      bindings = from_bindings(reflection.bindings);
    } else {
      bindings = from_arguments(reflection.arguments);
    }
  }
  if (!pipeline) throw CompileFailure("kernel '" + name + "': " + error);
  KernelSpec spec =
      spec_from_reflection(name, bindings, declared, uint32_t(pipeline.maxTotalThreadsPerThreadgroup), file);
  return std::make_shared<MetalKernel>(dev, pipeline, std::move(spec));
}

}  // namespace mk
