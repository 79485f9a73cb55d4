// printf-style formatting of a logged message (os_log's format and its arguments).
#pragma once
#include <string>

#include "metalkit/abi.h"

namespace mk {

// The message `format` makes of `args`, as printf would with C varargs' promotions (integers
// widened, float and half as double). Conversions: d i u o x X c s p f F e E g G a A and %%,
// with flags, width, precision (`*` takes an int argument) and length modifiers hh h l ll j z t;
// os_log's privacy annotations (`%{public}d`) are accepted and ignored. An integer conversion
// without a length modifier takes the argument at its own size (a long prints whole). A
// conversion whose argument is missing or of another kind prints `<%d: no argument>` /
// `<%f: int argument>` in its place; %n prints nothing.
std::string format_log(const char* format, const mk_log_arg* args, int nargs);

}  // namespace mk
