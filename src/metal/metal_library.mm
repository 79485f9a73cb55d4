// MSL source and .metallib files -> a LibraryImpl. A library keeps the
// constants= it was made with, specializes each kernel with them and caches one
// pipeline per kernel name, so a kernel's pipeline is built once and a changed
// source (a new library: Python caches libraries by source) never reuses a
// stale one. Pipelines are built without the GIL, several threads at once
// (core/kernel_cache.h).
// Metal APIs: MTLCompileOptions with languageVersion (MTLLanguageVersion3_1,
// macOS 14; MTLLanguageVersion3_2 and enableLogging, macOS 15, for a source that logs), mathMode and mathFloatingPointFunctions (macOS 15; fastMathEnabled
// before) and preprocessorMacros;
// newLibraryWithSource:options:error:, newLibraryWithURL:error: (macOS 10.13),
// label, functionNames, newFunctionWithName:, functionType,
// functionConstantsDictionary and MTLFunctionConstant (macOS 10.12),
// MTLFunctionConstantValues setConstantValue:type:atIndex:,
// newFunctionWithName:constantValues:error: (macOS 10.12).
#include <algorithm>

#include "../core/errors.h"
#include "../core/function_constants.h"
#include "../core/kernel_cache.h"
#include "metal_backend.h"
#include "metal_internal.h"

namespace mk {
namespace {

// The function constants a function declares; `types` gets each one's Metal type.
std::vector<ConstantDecl> declared_constants(id<MTLFunction> function, std::vector<MTLDataType>* types) {
  std::vector<ConstantDecl> out;
  NSDictionary<NSString*, MTLFunctionConstant*>* by_name = function.functionConstantsDictionary;
  for (NSString* key in by_name) {
    MTLFunctionConstant* constant = [by_name objectForKey:key];
    ConstantDecl d;
    d.name = std_string(constant.name);
    d.index = int(constant.index);
    element_type(constant.type, &d.type, &d.vec_width);
    d.required = constant.required;
    out.push_back(d);
    if (types) types->push_back(constant.type);
  }
  return out;
}

class MetalLibrary : public LibraryImpl {
 public:
  MetalLibrary(MetalDevice& dev, id<MTLLibrary> library, std::string file, std::vector<ConstantArg> constants,
               KernelDecls declared, std::vector<std::string> names)
      : dev_(dev), library_(library), file_(std::move(file)), constants_(std::move(constants)),
        declared_(std::move(declared)), names_(std::move(names)) {}

  std::vector<std::string> kernel_names() const override { return names_; }

  std::shared_ptr<KernelImpl> kernel(const std::string& name) override {
    if (std::find(names_.begin(), names_.end(), name) == names_.end()) return nullptr;
    return kernels_.get(name, [&] {
      auto it = declared_.find(name);
      return make_metal_kernel(dev_, specialized(name), name, it == declared_.end() ? nullptr : &it->second, file_);
    });
  }
  bool concurrent_kernels() const override { return true; }  // the bindings build pipelines without the GIL

 private:
  // The kernel function with this library's function constants applied.
  id<MTLFunction> specialized(const std::string& name) {
    id<MTLFunction> function;
    std::vector<ConstantDecl> decls;
    std::vector<MTLDataType> types;
    @autoreleasepool {
      function = [library_ newFunctionWithName:ns_string(name)];
      decls = declared_constants(function, &types);
    }
    if (decls.empty()) return function;
    const std::vector<ConstantValue> values = resolve_constants(name, decls, constants_);
    std::string error;
    @autoreleasepool {
      MTLFunctionConstantValues* given = [[MTLFunctionConstantValues alloc] init];
      for (const ConstantValue& v : values)
        [given setConstantValue:v.bytes.data() type:types[v.decl] atIndex:NSUInteger(decls[v.decl].index)];
      NSError* failure = nil;
      function = [library_ newFunctionWithName:ns_string(name) constantValues:given error:&failure];
      if (!function) error = error_text(failure, "Metal could not specialize it");
    }
    if (!function) throw CompileFailure(kernel_prefix(name) + error);
    return function;
  }

  MetalDevice& dev_;
  id<MTLLibrary> library_;
  std::string file_;
  std::vector<ConstantArg> constants_;
  KernelDecls declared_;
  std::vector<std::string> names_;
  KernelCache kernels_;  // the pipeline cache, shared by threads
};

std::shared_ptr<LibraryImpl> make_library(MetalDevice& dev, id<MTLLibrary> library, const std::string& file,
                                          const std::vector<ConstantArg>& constants, const KernelDecls& declared) {
  std::vector<std::string> names;
  std::vector<ConstantDecl> used;  // constants any kernel declares, to catch misspelt constants= keys
  @autoreleasepool {
    for (NSString* name in library.functionNames) {
      id<MTLFunction> function = [library newFunctionWithName:name];
      if (function.functionType != MTLFunctionTypeKernel) continue;
      names.push_back(std_string(name));
      if (!constants.empty()) {
        std::vector<ConstantDecl> decls = declared_constants(function, nullptr);
        used.insert(used.end(), decls.begin(), decls.end());
      }
    }
  }
  std::sort(names.begin(), names.end());
  check_constants_declared(constants, used);
  return std::make_shared<MetalLibrary>(dev, library, file, constants, declared, std::move(names));
}

#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
// Shader logging for a source that logs: <metal_logging> is MSL 3.2.
void enable_logging(MTLCompileOptions* options) API_AVAILABLE(macos(15.0)) {
  options.languageVersion = MTLLanguageVersion3_2;
  options.enableLogging = YES;
}
#endif

}  // namespace

std::shared_ptr<LibraryImpl> metal_compile(const std::string& source, const std::string& filename,
                                           const std::vector<ConstantArg>& constants, bool fast_math,
                                           const KernelDecls& kernels, bool logging) {
  MetalDevice& dev = metal_device();
  id<MTLLibrary> library;
  std::string log;
  @autoreleasepool {
    MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
    // The CPU simulator implements MSL 3.1 (__METAL_VERSION__ 310): one language on both backends.
    if (@available(macOS 14.0, *)) options.languageVersion = MTLLanguageVersion3_1;
    // Metal's default is fast math; metalkit's is IEEE math unless fast_math=True, as on the CPU.
    // From the macOS 15 SDK, mathMode replaces fastMathEnabled for arithmetic, and the
    // single-precision math functions (exp, sin, pow...) are a property of their own whose
    // default is the fast ones: both are set, as fastMathEnabled set both before.
#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
    if (@available(macOS 15.0, *)) {
      options.mathMode = fast_math ? MTLMathModeFast : MTLMathModeSafe;
      options.mathFloatingPointFunctions =
          fast_math ? MTLMathFloatingPointFunctionsFast : MTLMathFloatingPointFunctionsPrecise;
    } else
#endif
    {
      options.fastMathEnabled = fast_math;
    }
    // <metal_logging> (os_log) is MSL 3.2, and logging costs even when nothing is printed (Apple),
    // so it is on only for a source that logs. Before macOS 15 (or built with an older SDK) there
    // is none: such a source fails to compile, as Apple's compiler there has no <metal_logging>.
    (void)logging;
#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
    if (logging) {
      if (@available(macOS 15.0, *)) enable_logging(options);
    }
#endif
    // Lets a kernel tell the backends apart, as __METALKIT_CPU__ marks the simulator.
    options.preprocessorMacros = @{@"__METALKIT_METAL__" : @"1"};
    NSError* error = nil;
    library = [dev.device newLibraryWithSource:ns_string(source) options:options error:&error];
    if (library)
      library.label = ns_string(filename);
    else
      log = error_text(error, "the Metal compiler failed without a message");
  }
  if (!library) throw CompileFailure(log);
  return make_library(dev, library, filename, constants, kernels);
}

std::shared_ptr<LibraryImpl> metal_load_metallib(const std::string& path, const std::vector<ConstantArg>& constants) {
  MetalDevice& dev = metal_device();
  id<MTLLibrary> library;
  std::string log;
  @autoreleasepool {
    NSError* error = nil;
    library = [dev.device newLibraryWithURL:[NSURL fileURLWithPath:ns_string(path)] error:&error];
    if (library)
      library.label = ns_string(path);
    else
      log = error_text(error, "Metal could not read it");
  }
  if (!library) throw CompileFailure("cannot load " + path + ": " + log);
  return make_library(dev, library, path, constants, {});
}

}  // namespace mk
