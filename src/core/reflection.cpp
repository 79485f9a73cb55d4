#include "reflection.h"

#include <algorithm>

#include "errors.h"

namespace mk {
namespace {

const ParamDecl* find_param(const KernelDecl* declared, bool threadgroup, int index) {
  if (!declared) return nullptr;
  for (const ParamDecl& p : declared->params)
    if ((p.kind == ArgKind::Threadgroup) == threadgroup && p.index == index) return &p;
  return nullptr;
}

// "device const float4* a", for messages when the source's own text is unknown.
std::string spelled(const ReflectedBinding& b) {
  if (b.type == ReflectedBinding::Type::Threadgroup) return "threadgroup void* " + b.name;
  std::string type = b.elem_type == MK_T_STRUCT ? "struct(" + std::to_string(b.size) + " bytes)"
                                                : std::string(msl_type_name(b.elem_type)) +
                                                      (b.vec_width > 1 ? std::to_string(b.vec_width) : "");
  return std::string(b.writable ? "device " : "device const ") + type + "* " + b.name;
}

}  // namespace

KernelSpec spec_from_reflection(const std::string& kernel, const std::vector<ReflectedBinding>& bindings,
                                const KernelDecl* declared, uint32_t max_threads, const std::string& file) {
  KernelSpec spec;
  spec.name = kernel;
  spec.max_threads = max_threads;
  spec.file = declared && !declared->file.empty() ? declared->file : file;
  spec.line = declared ? declared->line : 0;
  for (const ReflectedBinding& b : bindings) {
    if (b.type == ReflectedBinding::Type::Other)
      throw CompileFailure("kernel '" + kernel + "' takes a " + b.other + " parameter '" + b.name +
                           "'; metalkit passes only buffers, scalars and threadgroup memory to kernels");
    const bool tg = b.type == ReflectedBinding::Type::Threadgroup;
    ArgSpec a;
    a.index = b.index;
    a.name = b.name;
    a.decl = spelled(b);
    a.kind = tg ? ArgKind::Threadgroup : ArgKind::Buffer;
    a.type = tg ? MK_T_STRUCT : b.elem_type;
    a.vec_width = tg ? 1 : b.vec_width;
    a.space = tg ? Space::Threadgroup : Space::None;  // unknown until the signature says
    a.writable = tg || b.writable;
    a.elem_size = b.size;
    a.elem_align = std::max<uint64_t>(b.align, 1);
    if (const ParamDecl* p = find_param(declared, tg, b.index)) {
      a.name = p->name;
      a.decl = p->decl;
      a.space = p->space;
      if (!tg) a.kind = p->kind;
      if (!tg && p->array_len) {  // reflection may size the whole array: the spec sizes one element
        a.array_len = p->array_len;
        if (a.elem_size % p->array_len == 0 && a.elem_size / p->array_len >= element_size(a.type) * uint64_t(a.vec_width))
          a.elem_size /= p->array_len;
      }
      if (a.kind == ArgKind::Scalar) a.writable = false;
    }
    spec.args.push_back(std::move(a));
  }
  std::stable_sort(spec.args.begin(), spec.args.end(), [](const ArgSpec& x, const ArgSpec& y) {
    bool tx = x.kind == ArgKind::Threadgroup, ty = y.kind == ArgKind::Threadgroup;
    return tx != ty ? ty : x.index < y.index;
  });
  if (declared)
    for (const BuiltinDecl& b : declared->builtins) {
      ArgSpec a;
      a.kind = ArgKind::Builtin;
      a.name = b.name;
      a.decl = b.decl;
      a.builtin = b.builtin;
      a.vec_width = b.vec_width;
      a.type = b.decl.find("short") != std::string::npos ? MK_T_U16 : MK_T_U32;
      spec.args.push_back(std::move(a));
    }
  for (size_t i = 0; i < spec.args.size(); ++i) spec.args[i].position = int(i);
  return spec;
}

}  // namespace mk
