// A kernel's compute pipeline, and its KernelSpec from pipeline reflection
// (core/reflection.h turns the reflected bindings into ArgSpecs).
// Metal APIs: newComputePipelineStateWithFunction:options:reflection:error:
// with MTLPipelineOptionBindingInfo; reflection.bindings and MTLBinding /
// MTLBufferBinding / MTLThreadgroupBinding (macOS 13), reflection.arguments and
// MTLArgument before macOS 13; maxTotalThreadsPerThreadgroup,
// staticThreadgroupMemoryLength (macOS 10.13); MTLDataTypeBFloat (macOS 14 SDK).
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

const char* binding_kind(MTLBindingType type) {
  switch (type) {
    case MTLBindingTypeTexture: return "texture";
    case MTLBindingTypeSampler: return "sampler";
    default: return "non-buffer";
  }
}

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
      r.other = binding_kind(binding.type);
    }
    out.push_back(std::move(r));
  }
  return out;
}

// The same from the argument reflection macOS 11 and 12 have (deprecated since 13).
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
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
#pragma clang diagnostic pop

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
    // BindingInfo has the value ArgumentInfo had, so one request serves both reflections.
    pipeline = [dev.device newComputePipelineStateWithFunction:function
                                                       options:MTLPipelineOptionBindingInfo
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
