// A non-owning reference to a callable, as C++26's std::function_ref: handing a lambda to a
// parallel region through it costs no heap allocation (a std::function with more than two
// captures allocates on every call). Valid while the referenced callable lives, which for a
// temporary lambda argument is the whole call it is passed to.
#pragma once
#include <memory>
#include <type_traits>
#include <utility>

namespace k3 {

template <class Sig>
class FnRef;

template <class R, class... A>
class FnRef<R(A...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FnRef> && std::is_invocable_r_v<R, F&, A...>)
  FnRef(F&& f) noexcept  // NOLINT: implicit, like std::function
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, A... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<A>(a)...); }) {}

  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

}  // namespace k3
