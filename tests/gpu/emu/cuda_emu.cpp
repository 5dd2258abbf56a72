/* cuda_emu.cpp — the fiber scheduler and launch checks of the CPU emulation (cuda_emu.h). */
#include "cuda_emu.h"

namespace emu {
cudaError_t last_error = cudaSuccess;
std::map<const void *, int> smem_limits;
Fiber *cur = nullptr;
ucontext_t sched_ctx;
dim3 grid_dim, block_dim;
uint3 block_idx;
unsigned char *dyn_smem_buf = nullptr;
Barrier block_bar;
std::vector<Barrier> warp_bars;
std::vector<float> warp_slots;

enum { STACK_BYTES = 512 * 1024 };
static std::vector<Fiber> fibers;
static struct StackReaper {
    ~StackReaper() {
        for (Fiber &f : fibers) free(f.stack);
    }
} reaper;
static void (*cur_body)(void *);
static void *cur_arg;
static long progress; /* barrier releases and fiber exits: a scheduling round without any is a deadlock */
#ifdef __SANITIZE_ADDRESS__
static void *fake_stack;
#endif

static void switch_to_scheduler(void) {
#ifdef __SANITIZE_ADDRESS__
    __sanitizer_start_switch_fiber(&fake_stack, nullptr, 0);
#endif
    swapcontext(&cur->ctx, &sched_ctx);
#ifdef __SANITIZE_ADDRESS__
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
}

void yield(void) { switch_to_scheduler(); }

void barrier_wait(Barrier &b) {
    long gen = b.gen;
    if (++b.arrived >= b.expected) {
        b.arrived = 0;
        b.gen++;
        progress++;
        return;
    }
    while (b.gen == gen) yield();
}

static void fiber_main(void) {
#ifdef __SANITIZE_ADDRESS__
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
    cur_body(cur_arg);
    cur->done = 1;
    progress++;
    /* An exited thread no longer counts at its block's and warp's barriers (as on the GPU). */
    int w = warp_id();
    block_bar.expected--;
    warp_bars[w].expected--;
    for (Barrier *b : {&block_bar, &warp_bars[w]})
        if (b->arrived > 0 && b->arrived >= b->expected) {
            b->arrived = 0;
            b->gen++;
        }
#ifdef __SANITIZE_ADDRESS__
    __sanitizer_start_switch_fiber(nullptr, nullptr, 0);
#endif
    setcontext(&sched_ctx);
}

/* Apart from run_grid: getcontext "returns twice" and would make the compiler distrust run_grid's locals. */
static __attribute__((noinline)) void fiber_init(Fiber *f, uint3 tid) {
    f->tid = tid;
    f->done = 0;
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = STACK_BYTES;
    f->ctx.uc_link = nullptr;
    makecontext(&f->ctx, fiber_main, 0);
}

static void fail_launch(const char *what, cudaError_t e) {
    fprintf(stderr, "emulator: launch refused: %s\n", what);
    last_error = e;
}

void run_grid(const void *kernel_id, dim3 grid, dim3 block, size_t smem, void (*body)(void *), void *arg) {
    unsigned threads = block.x * block.y * block.z;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u)
        return fail_launch("grid dimensions", cudaErrorInvalidConfiguration);
    if (threads == 0 || threads > 1024 || threads % 32 != 0)
        return fail_launch("block size (the emulator also wants whole warps)", cudaErrorInvalidConfiguration);
    auto lim = smem_limits.find(kernel_id);
    size_t limit = lim == smem_limits.end() ? 48 * 1024 : (size_t)lim->second;
    if (smem > limit) {
        fprintf(stderr, "emulator: %zu bytes of dynamic shared memory, the kernel's limit is %zu\n", smem, limit);
        return fail_launch("shared memory", cudaErrorInvalidValue);
    }
    if (fibers.size() < threads) {
        size_t old = fibers.size();
        fibers.resize(threads);
        for (size_t i = old; i < threads; i++) fibers[i].stack = (char *)malloc(STACK_BYTES);
    }
    std::vector<unsigned char> smem_buf(smem + 256);
    unsigned char *base = (unsigned char *)(((uintptr_t)smem_buf.data() + 255) & ~(uintptr_t)255);
    grid_dim = grid;
    block_dim = block;
    cur_body = body;
    cur_arg = arg;
    warp_slots.assign((size_t)threads, 0.0f);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                block_idx = uint3{x, y, z};
                memset(base, 0xFF, smem);
                dyn_smem_buf = base;
                block_bar = Barrier{0, (int)threads, 0};
                warp_bars.assign(threads / 32, Barrier{0, 32, 0});
                for (unsigned t = 0; t < threads; t++)
                    fiber_init(&fibers[t], uint3{t % block.x, t / block.x % block.y, t / (block.x * block.y)});
                unsigned alive = threads;
                while (alive) {
                    long before = progress;
                    alive = 0;
                    for (unsigned t = 0; t < threads; t++) {
                        if (fibers[t].done) continue;
                        cur = &fibers[t];
#ifdef __SANITIZE_ADDRESS__
                        __sanitizer_start_switch_fiber(&fake_stack, fibers[t].stack, STACK_BYTES);
#endif
                        swapcontext(&sched_ctx, &fibers[t].ctx);
#ifdef __SANITIZE_ADDRESS__
                        __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
                        alive += !fibers[t].done;
                    }
                    if (alive && progress == before) {
                        fprintf(stderr, "emulator: deadlock in block (%u,%u,%u): %u threads wait at barriers no "
                                        "other thread will reach\n", x, y, z, alive);
                        abort();
                    }
                }
            }
    cur = nullptr;
}
} // namespace emu

namespace nvcuda {
namespace wmma {
void warp_meet(void) { emu::barrier_wait(emu::warp_bars[emu::warp_id()]); }
int lane(void) { return emu::lane_id(); }
void check_ptr(const void *p, unsigned ldm, size_t elem) {
    if ((uintptr_t)p % 32 != 0 || (ldm * elem) % 16 != 0) {
        fprintf(stderr, "emulator: WMMA pointer %p (must be 32-byte aligned) or ldm %u x %zu bytes (a multiple of 16)\n",
                p, ldm, elem);
        abort();
    }
}
} // namespace wmma
} // namespace nvcuda
