#include "reflection.h"

#include <algorithm>
#include <cctype>

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

uint64_t round_up(uint64_t x, uint64_t a) { return a ? (x + a - 1) / a * a : x; }

uint64_t struct_extent(const std::vector<ReflectedField>& fields, uint64_t* align);

// MSL's size and alignment of one element of f: a 3-lane vector takes 4 lanes, a matrix is its columns.
uint64_t element_extent(const ReflectedField& f, uint64_t* align) {
  if (f.pointer) return *align = 8;
  if (f.is_struct) return struct_extent(f.fields, align);
  if (f.type == MK_T_STRUCT) return *align = 1;  // undescribed: no bytes of its own known
  const uint64_t lane = element_size(f.type);
  const uint64_t vec = lane * uint64_t(f.vec_width == 3 ? 4 : f.vec_width);
  *align = vec;
  return f.columns ? vec * uint64_t(f.columns) : vec;
}

uint64_t field_extent(const ReflectedField& f, uint64_t* align) {
  const uint64_t one = element_extent(f, align);
  return f.arrays.empty() ? one : f.arrays.front().first * f.arrays.front().second;
}

uint64_t struct_extent(const std::vector<ReflectedField>& fields, uint64_t* align) {
  uint64_t end = 0, a = 1;
  for (const ReflectedField& f : fields) {
    uint64_t fa = 1;
    end = std::max(end, f.offset + field_extent(f, &fa));
    a = std::max(a, fa);
  }
  *align = a;
  return round_up(end, a);
}

}  // namespace

std::shared_ptr<const StructLayout> layout_from_reflection(const std::vector<ReflectedField>& fields, uint64_t size,
                                                           uint64_t align) {
  auto out = std::make_shared<StructLayout>();
  out->size = size;
  out->align = align;
  for (size_t i = 0; i < fields.size(); ++i) {
    const ReflectedField& r = fields[i];
    uint64_t room = size > r.offset ? size - r.offset : 0;  // up to the next member, or the struct's end
    for (const ReflectedField& o : fields)
      if (o.offset > r.offset) room = std::min(room, o.offset - r.offset);
    FieldLayout f;
    f.name = r.name;
    f.offset = r.offset;
    f.type = r.pointer ? MK_T_U64 : r.type;
    f.vec_width = r.pointer ? 1 : r.vec_width;
    for (const auto& a : r.arrays) f.dims.push_back(int(a.first));
    uint64_t a = 1;
    const uint64_t one = element_extent(r, &a);
    f.elem_size = r.arrays.empty() ? std::min(one, room) : r.arrays.back().second;  // a stride is exact
    if (r.columns) {  // a matrix is an array of its columns
      f.dims.push_back(r.columns);
      f.elem_size = (r.arrays.empty() ? one : r.arrays.back().second) / uint64_t(r.columns);
    }
    if (r.is_struct) {
      f.layout = layout_from_reflection(r.fields, f.elem_size, a);
    } else if (f.type == MK_T_STRUCT && r.arrays.empty()) {
      f.elem_size = room;  // bytes metalkit does not describe: all the room it has
    }
    out->fields.push_back(std::move(f));
  }
  return out;
}

// A parameter of raw memory (`device void*`, `constant void*`): declared so, or reflected
// with an element of no type and no bytes (what reflection may report for `void`). It takes
// any array's bytes, as on the CPU simulator; a struct of 0 bytes no array could match.
static bool raw_memory(const ReflectedBinding& b, const ParamDecl* p) {
  if (p) {
    const std::string& d = p->decl;
    for (size_t at = d.find("void"); at != std::string::npos; at = d.find("void", at + 4)) {
      const bool word = (at == 0 || !(std::isalnum((unsigned char)d[at - 1]) || d[at - 1] == '_')) &&
                        (at + 4 == d.size() || !(std::isalnum((unsigned char)d[at + 4]) || d[at + 4] == '_'));
      if (!word) continue;
      size_t next = d.find_first_not_of(" \t", at + 4);
      while (next != std::string::npos && d.compare(next, 5, "const") == 0)
        next = d.find_first_not_of(" \t", next + 5);
      if (next != std::string::npos && (d[next] == '*' || d[next] == '&')) return p->kind == ArgKind::Buffer;
    }
  }
  return b.elem_type == MK_T_STRUCT && !b.is_struct && b.size == 0;
}

KernelSpec spec_from_reflection(const std::string& kernel, const std::vector<ReflectedBinding>& bindings,
                                const KernelDecl* declared, uint32_t max_threads, const std::string& file) {
  KernelSpec spec;
  spec.name = kernel;
  spec.max_threads = max_threads;
  spec.file = declared && !declared->file.empty() ? declared->file : file;
  spec.line = declared ? declared->line : 0;
  for (const ReflectedBinding& b : bindings) {
    if (b.type == ReflectedBinding::Type::Other)
      throw CompileFailure(kernel_label(kernel) + " takes a " + b.other + " parameter '" + b.name +
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
    if (!tg && b.is_struct) a.layout = layout_from_reflection(b.fields, a.elem_size, a.elem_align);
    if (!tg && raw_memory(b, find_param(declared, false, b.index))) {
      a.type = MK_T_U8;  // bytes, whatever reflection calls the element: as the CPU backend takes `void*`
      a.vec_width = 1;
      a.elem_size = 1;
      a.elem_align = 1;
      a.layout = nullptr;
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
