// A library's kernels, each created once and then shared, for a backend whose kernels
// take long to create (a GPU pipeline build) and are therefore created without the GIL:
// several threads may ask at once (LibraryImpl::concurrent_kernels). One lock per
// library, held while a kernel is built, so each is built once; MLX guards its pipeline
// cache the same way.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backend.h"

namespace mk {

class KernelCache {
 public:
  // The kernel of that name, made by build() the first time (a build that throws leaves
  // no entry: the next request tries again).
  template <class Build>
  std::shared_ptr<KernelImpl> get(const std::string& name, Build&& build) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = kernels_.find(name);
    if (it != kernels_.end()) return it->second;
    std::shared_ptr<KernelImpl> made = build();
    if (made) kernels_.emplace(name, made);
    return made;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<KernelImpl>> kernels_;
};

}  // namespace mk
