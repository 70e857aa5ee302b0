// MhcPre's driver: the call's kernels from the registry, its plan, the staging
// of tensors that do not fit the kernels' views, then the preparation's parts
// and the token items on the thread pool.
#include <algorithm>
#include <functional>

#include "ops/call_resources.hpp"
#include "ops/isa.hpp"
#include "ops/kernel_views.hpp"
#include "ops/pre/forward_plan.hpp"
#include "ops/primitive_cache.hpp"
#include "ops/pre/forward.hpp"
#include "ops/pre/prepared.hpp"
#include "ops/staging.hpp"
#include "ops/streaming.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc::ops::pre::forward {
namespace {

static_assert(kernels::kMaxPrepareParts >= runtime::kMaxThreads, "a prepare part per thread");

kernels::PreShape shape_of(const core::ForwardProblem& p) { return ops::shape_of(p.dims, p.x.dtype, p.hf32); }

// The table that runs the call: the entry's own, or its base for the calls the
// own one does not apply to; and the finish its items end with.
struct Selected {
  const kernels::PreForwardKernels* kernels;
  kernels::FinishTokens finish;
};
Selected select(const core::ForwardProblem& problem) {
  const kernels::Implementation& entry = implementation(problem.isa);
  const kernels::PreForwardKernels* own = entry.pre_forward;
  const kernels::PreForwardKernels* base = entry.pre_forward_base;
  if (base == nullptr) return {own, nullptr};
  if (own->applies && !own->applies(shape_of(problem))) return {base, nullptr};
  return {own, base->finish_tokens};
}

// The operands that do not fit the kernels' views, staged (staging.hpp), and phi
// rounded to HF32 for an HF32 call. None for an empty batch, of which nothing is read.
Staging staging_of(core::ForwardProblem* p) {
  Staging staging;
  if (p->dims.T == 0) return staging;
  staging.add(&p->x, View::stream_rows, false);
  staging.add(&p->phi, View::matrix, false, p->hf32 && !p->phi_rounded ? Rounding::hf32 : Rounding::none);
  staging.add(&p->alpha, View::matrix, false);
  staging.add(&p->bias, View::matrix, false);
  staging.add(&p->gamma, View::matrix, false);
  staging.add(&p->h_in, View::stream_rows, true);
  staging.add(&p->h_post, View::token_rows, true);
  staging.add(&p->h_res, View::token_rows, true);
  staging.add(&p->inv_rms, View::token_rows, true);
  staging.add(&p->h_mix, View::token_rows, true);
  staging.add(&p->h_pre, View::token_rows, true);
  staging.add(&p->pre_mix, View::token_rows, false);
  return staging;
}

kernels::ForwardOperands operands_of(const core::ForwardProblem& p) {
  kernels::ForwardOperands o;
  o.shape = shape_of(p);
  o.norm_eps = p.norm_eps;
  o.hc_eps = p.hc_eps;
  o.x = stream_rows<const void>(p.x);
  o.phi = matrix<const float>(p.phi);
  o.gamma = matrix<const float>(p.gamma);
  o.alpha = static_cast<const float*>(p.alpha.data);
  o.bias = static_cast<const float*>(p.bias.data);
  o.h_in = stream_rows<void>(p.h_in);
  o.h_post = token_rows<float>(p.h_post);
  o.h_res = token_rows<float>(p.h_res);
  o.inv_rms = token_rows<float>(p.inv_rms);
  o.h_mix = token_rows<float>(p.h_mix);
  o.h_pre = token_rows<float>(p.h_pre);
  o.pre_mix = token_rows<const float>(p.pre_mix);
  o.select_first_stream = p.select_first_stream;
  o.streaming_stores = streaming_stores();
  return o;
}

using Form = PreparedPre::Form;
using FormKey = PreparedPre::FormKey;

// A prepared call's phi: the handle's contiguous copy, rounded to HF32 for an HF32
// call, when the call would otherwise stage it; the problem then reads that copy.
void use_prepared_phi(core::ForwardProblem* p, std::shared_ptr<const Form>* held) {
  if (p->prepared == nullptr || p->dims.T == 0 || (!p->hf32 && fits(p->phi, View::matrix))) return;
  FormKey key;
  key.shape.hf32 = p->hf32;
  *held = p->prepared->form(key, [&](Form* form) {
    core::Strided phi = p->phi;
    Staging staging;
    staging.add(&phi, View::matrix, false, p->hf32 ? Rounding::hf32 : Rounding::none);
    form->allocate(staging.workspace_bytes(0));
    staging.gather(form->data, 0, 1);
  });
  const int64_t F = p->phi.shape[2], K = p->phi.shape[3];
  p->phi.data = (*held)->data;
  p->phi.stride[3] = 1;
  p->phi.stride[2] = K;
  p->phi.stride[1] = p->phi.stride[0] = F * K;
  p->phi_rounded = p->hf32;
}

// A prepared call's preparation by its kernels, when it reads the weights alone and
// they fit the kernels' views as they are: made once with the handle, read by every
// call of the shape after (mhc-bench decode, prepared rows).
std::shared_ptr<const Form> family_form(const core::ForwardProblem& p, const kernels::PreForwardKernels& kernels) {
  const kernels::PreShape shape = shape_of(p);
  if (p.prepared == nullptr || shape.T == 0 || kernels.prepare == nullptr ||
      kernels.prepare_reads_weights_only == nullptr || !kernels.prepare_reads_weights_only(shape))
    return nullptr;
  for (const core::Strided* weight : {&p.phi, &p.alpha, &p.bias, &p.gamma})
    if (weight->present() && !fits(*weight, View::matrix)) return nullptr;
  FormKey key{.kind = FormKey::Kind::family, .isa = p.isa, .table = &kernels, .shape = shape};
  key.shape.T = 0;
  return p.prepared->form(key, [&](Form* form) {
    form->allocate(size_t(kernels.prepared_bytes(shape)));
    Form scratch;
    scratch.allocate(size_t(kernels.scratch_floats(shape)) * sizeof(float));
    form->finite = kernels.prepare(operands_of(p), form->data, 0, 1, static_cast<float*>(scratch.data)) ? 1 : 0;
  });
}

// A prepared call's phi in its kernels' panels (kernels.phi_panels_bytes), when
// phi fits the kernels' view: made once with the handle, so no call copies phi
// (mhc-bench decode, prepared rows).
std::shared_ptr<const Form> panels_form(const core::ForwardProblem& p, const kernels::PreForwardKernels& kernels) {
  const kernels::PreShape shape = shape_of(p);
  if (p.prepared == nullptr || shape.T == 0 || kernels.phi_panels_bytes == nullptr || !fits(p.phi, View::matrix))
    return nullptr;
  FormKey key{.kind = FormKey::Kind::phi_panels, .isa = p.isa, .table = &kernels, .shape = shape};
  key.shape.T = 0;
  return p.prepared->form(key, [&](Form* form) {
    form->allocate(size_t(kernels.phi_panels_bytes(shape)));
    kernels.lay_out_phi_panels(operands_of(p), static_cast<float*>(form->data));
  });
}

}  // namespace

Primitive make_primitive(const core::ForwardProblem& problem, int num_threads) {
  Primitive primitive;
  primitive.problem = problem;
  use_prepared_phi(&primitive.problem, &primitive.phi_form);
  const Selected selected = select(problem);
  primitive.kernels = selected.kernels;
  primitive.finish = selected.finish;
  primitive.threads = resolve_threads(num_threads);
  primitive.weights_form = family_form(primitive.problem, *selected.kernels);
  primitive.panels_form = panels_form(primitive.problem, *selected.kernels);
  primitive.plan =
      make_plan(*selected.kernels, shape_of(problem), primitive.threads, primitive.weights_form != nullptr);
  core::ForwardProblem staged = primitive.problem;
  const Staging staging = staging_of(&staged);
  primitive.staged = staging.any();
  primitive.operands = operands_of(primitive.problem);
  if (primitive.panels_form != nullptr)
    primitive.operands.phi_panels = static_cast<const float*>(primitive.panels_form->data);
  primitive.workspace_bytes = staging.workspace_bytes(primitive.plan.workspace_bytes);
  return primitive;
}

std::shared_ptr<const Primitive> cached_primitive(const core::ForwardProblem& problem, int num_threads) {
  thread_local PrimitiveCache<core::ForwardProblem, Primitive> cache;
  const int threads = resolve_threads(num_threads);
  return cache.get(problem, threads, std::equal_to<>(), [&] { return make_primitive(problem, threads); });
}

Status run(const Primitive& primitive, void* workspace, size_t workspace_bytes, const TokenPrologue* prologue) {
  const Plan& plan = primitive.plan;
  if (Status s = workspace_error(primitive.workspace_bytes, workspace_bytes, workspace); !s.ok()) return s;
  const int64_t T = primitive.problem.dims.T;
  if (T == 0) return {};
  const kernels::PreForwardKernels& kernels = *primitive.kernels;
  // Decode-sized calls read x in their preparation; staged ones in the gather.
  const bool prologue_first =
      prologue != nullptr && (primitive.staged || kernels.serial || T <= kernels::kDecodeTokens);
  if (prologue_first)
    runtime::parallel_for(kernels::ceil_div(T, plan.item_tokens), plan.threads, [&](int64_t item, int worker) {
      const int64_t t0 = item * plan.item_tokens;
      prologue->run(prologue->context, t0, std::min(T, t0 + plan.item_tokens), worker);
    });
  const TokenPrologue* per_item = prologue_first ? nullptr : prologue;
  // Only a staged call needs its own problem (pointing at the copies).
  core::ForwardProblem staged_problem;
  Staging staging;
  if (primitive.staged) {
    staged_problem = primitive.problem;
    staging = staging_of(&staged_problem);
    staging.gather(workspace, plan.workspace_bytes, primitive.threads);
  }
  kernels::ForwardOperands staged_operands;
  if (primitive.staged) {
    staged_operands = operands_of(staged_problem);
    staged_operands.phi_panels = primitive.operands.phi_panels;
  }
  const kernels::ForwardOperands& operands = primitive.staged ? staged_operands : primitive.operands;
  Workspace w = lay_out(plan, workspace);
  if (primitive.weights_form != nullptr) {
    const Form& form = *primitive.weights_form;
    w.prepared = {form.data, const_cast<uint8_t*>(&form.finite), 1};  // read only
  } else if (plan.prepare_parts > 0) {
    // What a helper reads travels in the job's line (the workspace's address) or
    // stays the same between calls (the primitive), not on this thread's stack,
    // whose lines it would fetch again for every call (mhc-bench decode).
    auto prepare = [&operands, &plan, &kernels, workspace](int64_t part, int worker) {
      const Workspace own = lay_out(plan, workspace);
      const bool finite = kernels.prepare(operands, own.prepared.data, part, plan.prepare_parts, own.scratch(worker));
      own.prepared.finite[part] = finite ? 1 : 0;
    };
    static_assert(runtime::detail::kBodyInline<decltype(prepare)>, "the job's captures in its line");
    runtime::parallel_for(plan.prepare_parts, plan.prepare_parts, prepare);
  }
  if (kernels.serial) {
    kernels.tokens({&operands, w.scratch_base, &w.prepared, primitive.finish}, 0, T);
  } else {
    runtime::parallel_for(plan.items, plan.threads, [&](int64_t item, int worker) {
      const int64_t t0 = item * plan.item_tokens, t1 = std::min(T, t0 + plan.item_tokens);
      if (per_item != nullptr) per_item->run(per_item->context, t0, t1, worker);
      kernels.tokens({&operands, w.scratch(worker), &w.prepared, primitive.finish}, t0, t1);
    });
  }
  if (primitive.staged) staging.scatter(primitive.threads);
  return {};
}

size_t workspace_bytes(const core::ForwardProblem& problem, int num_threads) {
  return cached_primitive(problem, num_threads)->workspace_bytes;
}

Status run(const core::ForwardProblem& problem, void* workspace, size_t workspace_bytes, int num_threads,
           const TokenPrologue* prologue) {
  return run(*cached_primitive(problem, num_threads), workspace, workspace_bytes, prologue);
}

Status run_in_thread_workspace(const core::ForwardProblem& problem, int num_threads) {
  const std::shared_ptr<const Primitive> primitive = cached_primitive(problem, num_threads);
  return in_thread_workspace(primitive->workspace_bytes, [&](void* workspace, size_t bytes) {
    return run(*primitive, workspace, bytes);
  });
}

}  // namespace mhc::ops::pre::forward
