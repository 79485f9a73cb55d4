// A kernel's compute pipeline, and its KernelSpec from pipeline reflection
// (core/reflection.h turns the reflected bindings into ArgSpecs).
// Metal APIs: newComputePipelineStateWithFunction:options:reflection:error:
// with MTLPipelineOptionBindingInfo (MTLPipelineOptionArgumentInfo before the
// macOS 15 SDK) and MTLPipelineOptionBufferTypeInfo (macOS 10.11); reflection.bindings and MTLBinding / MTLBufferBinding /
// MTLThreadgroupBinding (macOS 13), reflection.arguments and MTLArgument before
// macOS 13; maxTotalThreadsPerThreadgroup, threadExecutionWidth (macOS 10.11),
// staticThreadgroupMemoryLength (macOS 10.13); MTLDataTypeBFloat (macOS 14); a struct's layout from bufferStructType
// (MTLStructType, MTLStructMember, MTLArrayType; MTLDataTypePointer from macOS 10.13).
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

// A matrix MTLDataType: its element type, columns and rows.
bool matrix_type(MTLDataType type, int* mk_type, int* columns, int* rows) {
#define MK_MATRIX(T, MK, C, R) \
  case MTLDataType##T##C##x##R: *mk_type = MK; *columns = C; *rows = R; return true;
#define MK_MATRICES(T, MK) \
  MK_MATRIX(T, MK, 2, 2) MK_MATRIX(T, MK, 2, 3) MK_MATRIX(T, MK, 2, 4) \
  MK_MATRIX(T, MK, 3, 2) MK_MATRIX(T, MK, 3, 3) MK_MATRIX(T, MK, 3, 4) \
  MK_MATRIX(T, MK, 4, 2) MK_MATRIX(T, MK, 4, 3) MK_MATRIX(T, MK, 4, 4)
  switch (type) {
    MK_MATRICES(Float, MK_T_F32)
    MK_MATRICES(Half, MK_T_F16)
    default: return false;
  }
#undef MK_MATRICES
#undef MK_MATRIX
}

std::vector<ReflectedField> reflected_fields(MTLStructType* type);

// What one element of a member is (after its array levels).
void reflected_element(MTLDataType type, MTLStructType* structure, ReflectedField* f) {
  int rows = 1;
  if (type == MTLDataTypeStruct && structure) {
    f->is_struct = true;
    f->fields = reflected_fields(structure);
  } else if (type == MTLDataTypePointer) {
    f->pointer = true;
  } else if (matrix_type(type, &f->type, &f->columns, &rows)) {
    f->vec_width = rows;
  } else {
    element_type(type, &f->type, &f->vec_width);
  }
}

// A struct's members (MTLStructMember: name, offset, dataType, structType, arrayType);
// arrays through MTLArrayType (arrayLength, stride, elementType, elementStructType, elementArrayType).
std::vector<ReflectedField> reflected_fields(MTLStructType* type) {
  std::vector<ReflectedField> out;
  for (MTLStructMember* member in type.members) {
    ReflectedField f;
    f.name = std_string(member.name);
    f.offset = member.offset;
    MTLDataType element = member.dataType;
    MTLStructType* structure = [member structType];
    for (MTLArrayType* array = [member arrayType]; element == MTLDataTypeArray && array;) {
      f.arrays.push_back({array.arrayLength, array.stride});
      element = array.elementType;
      structure = [array elementStructType];
      array = [array elementArrayType];
    }
    reflected_element(element, structure, &f);
    out.push_back(std::move(f));
  }
  return out;
}

// One request serves both reflections. The macOS 15 SDK renamed
// MTLPipelineOptionArgumentInfo (deprecated from macOS 13) to
// MTLPipelineOptionBindingInfo, keeping its bit; older SDKs have only the old name.
// Without MTLPipelineOptionBufferTypeInfo, bufferStructType and bufferPointerType
// are nil (Apple's documentation of both options), and no struct has a layout.
#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
constexpr MTLPipelineOption kReflectBindings = MTLPipelineOptionBindingInfo | MTLPipelineOptionBufferTypeInfo;
#else
constexpr MTLPipelineOption kReflectBindings = MTLPipelineOptionArgumentInfo | MTLPipelineOptionBufferTypeInfo;
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
      if (buffer.bufferDataType == MTLDataTypeStruct && buffer.bufferStructType) {
        r.is_struct = true;
        r.fields = reflected_fields(buffer.bufferStructType);
      }
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
      if (argument.bufferDataType == MTLDataTypeStruct && argument.bufferStructType) {
        r.is_struct = true;
        r.fields = reflected_fields(argument.bufferStructType);
      }
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
  if (!pipeline) throw CompileFailure(kernel_prefix(name) + error);
  KernelSpec spec =
      spec_from_reflection(name, bindings, declared, uint32_t(pipeline.maxTotalThreadsPerThreadgroup), file);
  spec.simd_width = uint32_t(pipeline.threadExecutionWidth);
  return std::make_shared<MetalKernel>(dev, pipeline, std::move(spec));
}

}  // namespace mk
