#include "arg_spec.h"

namespace mk {

const char* msl_type_name(int type) {
  static const char* names[MK_T_COUNT] = {"bool", "char", "uchar", "short", "ushort", "int", "uint",
                                          "long", "ulong", "half", "bfloat", "float", "struct"};
  return type >= 0 && type < MK_T_COUNT ? names[type] : "?";
}

const char* numpy_type_name(int type) {
  static const char* names[MK_T_COUNT] = {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                                          "int64", "uint64", "float16", "bfloat16", "float32", ""};
  return type >= 0 && type < MK_T_COUNT ? names[type] : "";
}

uint64_t element_size(int type) {
  switch (type) {
    case MK_T_BOOL: case MK_T_I8: case MK_T_U8: return 1;
    case MK_T_I16: case MK_T_U16: case MK_T_F16: case MK_T_BF16: return 2;
    case MK_T_I32: case MK_T_U32: case MK_T_F32: return 4;
    default: return 8;
  }
}

}  // namespace mk
