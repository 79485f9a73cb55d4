// The interfaces a backend implements. Everything a backend receives has
// already been matched and validated above it; it only runs the request.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "arg_spec.h"
#include "geometry.h"

namespace mk {

// Device memory that numpy arrays can view (shared storage on Metal).
class Allocation {
 public:
  virtual ~Allocation() = default;
  void* data() const { return data_; }
  size_t size() const { return size_; }

 protected:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// One argument of one call, in the kernel's parameter order.
struct BoundArg {
  void* data = nullptr;            // host address (buffer contents or scalar bytes)
  size_t nbytes = 0;
  const Allocation* alloc = nullptr;  // device allocation holding data, if known
  size_t offset = 0;               // data - alloc->data()
  uint32_t tg_offset = 0;          // threadgroup parameters: offset in the group's arena
};

struct Launch {
  Geometry geometry;
  std::vector<BoundArg> args;      // one per parameter (builtins unused)
  uint64_t tg_bytes = 0;           // dynamic threadgroup memory per group
};

class KernelImpl {
 public:
  virtual ~KernelImpl() = default;
  const KernelSpec& spec() const { return spec_; }
  // Runs and waits. Called without the GIL; must not touch Python objects.
  virtual void dispatch(const Launch& launch) = 0;
  // Whether dispatch() uses BoundArg::alloc (the bindings then look it up).
  virtual bool wants_allocations() const { return false; }
  // Wall or GPU time of the last dispatch in seconds.
  double last_time() const { return last_time_; }

 protected:
  KernelSpec spec_;
  double last_time_ = 0;
};

class LibraryImpl {
 public:
  virtual ~LibraryImpl() = default;
  virtual std::vector<std::string> kernel_names() const = 0;
  // nullptr if there is no kernel of that name.
  virtual std::shared_ptr<KernelImpl> kernel(const std::string& name) = 0;
};

}  // namespace mk
