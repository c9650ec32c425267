/* The split backend (src/backend/split/split.c), without a model: -ngl's values (a count or auto; -3,
 * abc and "" refused with the reason), -ngl on the CPU refused, 0 and all layers handing out the plain
 * backends, an architecture that never names its layers refused at reserve, and the memory really
 * split: with 1 of 4 layers on the device, the device's memory grows by that layer's K and V pool only
 * (a quarter of the whole; the CPU backend is given the other three); a group with no layer on the device
 * costs it one layer's pool (the batch names its blocks there); a recurrent group's slots split by layer
 * the same way, and a slot that is not equal shares per layer (an MTP head's tail) refused; a matrix
 * bound on one side and used by an op on the other fails the op with the reason (and is never handed to
 * the other backend); and every op the CPU backend has, the split wraps (an op added to backend.h without
 * a wrapper fails here). Whole models across the sides, against
 * the references and the single backends: tests/test_vulkan_split.py. Skips without a Vulkan device. */
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/info.h"
#include "check.h"

enum { LAYERS = 4, KV_DIM = 64, BLOCKS = 64, BLOCK_SIZE = 16 };

static bool usable_device(void) {
    char devs[8192];
    pith_err err;
    if (pith_backend_list_devices(devs, sizeof devs, &err)) return false;
    for (const char *l = devs; (l = strstr(l, "vulkan:")); l++) {
        const char *eol = strchr(l, '\n');
        size_t len = eol ? (size_t)(eol - l) : strlen(l);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), l);
        if (line[7] >= '0' && line[7] <= '9' && !strstr(line, "cannot run")) return true;
    }
    printf("skip: no Vulkan device can run pith here:\n%s", devs);
    return false;
}

static void check_parse(void) {
    pith_err err;
    int n = -2;
    CHECK(pith_backend_parse_gpu_layers("12", &n, &err) == 0 && n == 12);
    CHECK(pith_backend_parse_gpu_layers("0", &n, &err) == 0 && n == 0);
    CHECK(pith_backend_parse_gpu_layers("auto", &n, &err) == 0 && n == -1);
    static const char *const bad[] = {"-3", "abc", "", "3x", "99999999999", " 2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = pith_backend_parse_gpu_layers(bad[i], &n, &err);
        CHECKF(rc != 0 && strstr(err.msg, "expected a number of layers"), "-ngl \"%s\": rc %d, %s", bad[i], rc,
               rc ? err.msg : "");
    }
}

static pith_backend *make(const char *device, const char *ngl, int n_cpu_moe, char *what, size_t cap) {
    pith_backend *be = NULL;
    pith_err err;
    if (pith_backend_create_split(device, 1, LAYERS, ngl, n_cpu_moe, NULL, what, cap, &be, &err)) {
        fprintf(stderr, "create_split(%s, -ngl %s): %s\n", device, ngl ? ngl : "(none)", err.msg);
        return NULL;
    }
    return be;
}

static void check_choices(void) {
    pith_err err;
    pith_backend *be = NULL;
    CHECK(pith_backend_create_split("cpu", 1, LAYERS, "2", 0, NULL, NULL, 0, &be, &err) != 0 && !be);
    CHECKF(strstr(err.msg, "--device vulkan") != NULL, "%s", err.msg);
    char what[160];
    be = make("cpu", "0", 0, what, sizeof what);
    CHECK(be && !strcmp(be->vt->name, "cpu"));
    pith_backend_free(be);
    be = make("cpu", NULL, -1, what, sizeof what); /* --cpu-moe on the CPU: nothing to move */
    CHECK(be && !strcmp(be->vt->name, "cpu"));
    pith_backend_free(be);
    be = make("vulkan", "0", 0, what, sizeof what);
    CHECK(be && !strcmp(be->vt->name, "cpu"));
    pith_backend_free(be);
    be = make("vulkan", "4", 0, what, sizeof what);
    CHECK(be && !strcmp(be->vt->name, "vulkan"));
    pith_backend_free(be);
    be = make("vulkan", "9", 0, what, sizeof what);
    CHECK(be && !strcmp(be->vt->name, "vulkan"));
    pith_backend_free(be);
    be = make("vulkan", "4", -1, what, sizeof what); /* CPU experts keep the split */
    CHECK(be && !strcmp(be->vt->name, "split"));
    CHECKF(strstr(what, "experts") != NULL, "%s", what);
    pith_backend_free(be);
    be = make("vulkan", "1", 0, what, sizeof what);
    CHECK(be && !strcmp(be->vt->name, "split"));
    CHECKF(!strcmp(what, "layers 0-2 on the CPU, 3-3 on vulkan"), "%s", what);
    /* no layer named: refused at reserve with the reason */
    if (be) {
        pith_be_begin_layer(be, 0), pith_be_begin_layer(be, 1), pith_be_begin_layer(be, 3);
        CHECK(pith_be_reserve(be, 8, &err) != 0);
        CHECKF(strstr(err.msg, "layer 2") && strstr(err.msg, "does not name its layers"), "%s", err.msg);
    }
    pith_backend_free(be);
}

/* Device bytes a mem_alloc of spec takes on be's device side. */
static size_t device_bytes(pith_backend *be, const pith_mem_spec *spec, const pith_mem_layout *lay) {
    pith_backend *dev = pith_backend_split_side(be, true);
    pith_err err;
    size_t before, after;
    if (!dev || pith_backend_vulkan_free_memory(dev, &before, &err)) return 0;
    if (be->vt->mem_alloc(be, spec, lay, &err)) {
        fprintf(stderr, "mem_alloc: %s\n", err.msg);
        return 0;
    }
    CHECK(be->vt->mem_allocated(be));
    if (pith_backend_vulkan_free_memory(dev, &after, &err)) return 0;
    be->vt->mem_free(be);
    return before - after;
}

static void check_memory(void) {
    static const int all[LAYERS] = {0, 1, 2, 3}, local[3] = {0, 1, 2}, global[1] = {3}, mixed_local[2] = {0, 3},
                     mixed_global[2] = {1, 2};
    pith_mem_layout lay = {.block_size = BLOCK_SIZE, .n_groups = 1, .n_blocks = {BLOCKS}, .type = {PITH_F16}};
    pith_mem_spec one = {.n_groups = 1};
    one.groups[0] = (pith_mem_group){.kind = PITH_MEM_FULL, .n_layers = LAYERS, .layers = all, .type = PITH_F16,
                                     .k_dim = KV_DIM, .v_dim = KV_DIM};
    const size_t layer = 2 * (size_t)BLOCKS * BLOCK_SIZE * KV_DIM * 2; /* K and V of one layer, F16 */
    pith_be_attn_shape shape = {.n_heads = 4, .n_kv_heads = 1, .head_dim = KV_DIM, .scale = 0.125f};
    pith_err err;

    /* the whole pool on the device alone: four layers */
    pith_backend *gpu = make("vulkan", "4", 0, NULL, 0), *be = make("vulkan", "1", 0, NULL, 0);
    CHECK(gpu && be);
    if (!gpu || !be) goto done;
    CHECK(gpu->vt->attn_shape(gpu, &shape, &err) == 0 && be->vt->attn_shape(be, &shape, &err) == 0);
    size_t free0, free1;
    CHECK(pith_backend_vulkan_free_memory(gpu, &free0, &err) == 0);
    CHECK(gpu->vt->mem_alloc(gpu, &one, &lay, &err) == 0);
    CHECK(pith_backend_vulkan_free_memory(gpu, &free1, &err) == 0);
    size_t whole = free0 - free1;
    gpu->vt->mem_free(gpu);
    size_t part = device_bytes(be, &one, &lay);
    printf("KV pool of 4 layers: %zu bytes on the device alone, %zu with -ngl 1 (one layer: %zu)\n", whole, part,
           layer);
    CHECKF(whole >= 4 * layer && part >= layer && part < 2 * layer && part * 4 <= whole + 4 * 4096,
           "whole %zu, part %zu", whole, part);
    CHECK(pith_backend_split_side(be, false) && !strcmp(pith_backend_split_side(be, false)->vt->name, "cpu"));

    /* two groups (Gemma 3's local and global layers): the device's layer 3 is global, so its local
     * group is one unused layer */
    pith_mem_spec two = {.n_groups = 2};
    two.groups[0] = (pith_mem_group){.kind = PITH_MEM_WINDOW, .window = 32, .n_layers = 3, .layers = local,
                                     .type = PITH_F16, .k_dim = KV_DIM, .v_dim = KV_DIM};
    two.groups[1] = (pith_mem_group){.kind = PITH_MEM_FULL, .n_layers = 1, .layers = global, .type = PITH_F16,
                                     .k_dim = KV_DIM, .v_dim = KV_DIM};
    pith_mem_layout lay2 = {.block_size = BLOCK_SIZE, .n_groups = 2, .n_blocks = {BLOCKS, BLOCKS},
                            .type = {PITH_F16, PITH_F16}};
    part = device_bytes(be, &two, &lay2);
    CHECKF(part >= 2 * layer && part < 3 * layer, "two groups: %zu bytes on the device", part);
    /* the other way round: layers 0 and 3 local, the device holds one layer of each group */
    two.groups[0].n_layers = 2, two.groups[0].layers = mixed_local;
    two.groups[1].n_layers = 2, two.groups[1].layers = mixed_global;
    part = device_bytes(be, &two, &lay2);
    CHECKF(part >= 2 * layer && part < 3 * layer, "mixed groups: %zu bytes on the device", part);
    /* recurrent state (the hybrids' mixers): each layer an equal share of the slot, the device holding
     * its one layer's share of every slot */
    enum { SHARE = 4096 * sizeof(float) };
    pith_mem_spec rec = {.n_groups = 1};
    rec.groups[0] = (pith_mem_group){.kind = PITH_MEM_RECURRENT, .n_layers = LAYERS, .layers = all,
                                     .state_bytes = LAYERS * SHARE};
    part = device_bytes(be, &rec, &lay);
    printf("recurrent slots of 4 layers, -ngl 1: %zu bytes on the device (one layer's shares: %zu)\n", part,
           (size_t)BLOCKS * SHARE);
    CHECKF(part >= (size_t)BLOCKS * SHARE && part < 2 * (size_t)BLOCKS * SHARE, "recurrent: %zu bytes", part);
    /* a slot with more than the layers' shares (an MTP head's hidden-state tail): refused with the reason */
    rec.groups[0].state_bytes = LAYERS * SHARE + sizeof(float);
    CHECK(be->vt->mem_alloc(be, &rec, &lay, &err) != 0);
    CHECKF(strstr(err.msg, "equal shares") != NULL, "%s", err.msg);
    CHECK(!be->vt->mem_allocated(be));
done:
    pith_backend_free(gpu);
    pith_backend_free(be);
}

/* A matrix bound under layer 0 (the CPU) used by an op of layer 3 (the device): the op fails with the
 * reason, and the device backend never sees the CPU's weight. */
static void check_wrong_side(void) {
    enum { ROWS = 8, COLS = 32 };
    static float data[ROWS * COLS];
    pith_tensor t = {.name = "blk.0.w.weight", .type = PITH_F32, .n_dims = 2, .ne = {COLS, ROWS, 1, 1},
                     .data = data, .nbytes = sizeof data};
    pith_err err;
    pith_weight *w = NULL;
    pith_backend *be = make("vulkan", "1", 0, NULL, 0);
    CHECK(be != NULL);
    if (!be) return;
    pith_be_begin_layer(be, 0);
    pith_buf *in = pith_be_buffer(be, COLS, &err), *out = pith_be_buffer(be, ROWS, &err);
    CHECK(in && out && be->vt->matrix(be, &t, t.name, &w, &err) == 0);
    for (int l = 0; l < LAYERS; l++) pith_be_begin_layer(be, l);
    if (in && out && w && pith_be_reserve(be, 4, &err) == 0) {
        const pith_be_mm mm = {w, out, false};
        CHECK(pith_be_matmul(be, in, &mm, 1, 4, &err) != 0);
        CHECKF(strstr(err.msg, "other side") != NULL, "%s", err.msg);
    }
    pith_backend_free(be);
}

/* Every op the CPU backend has, the split has too: an op added to backend.h without a wrapper here
 * would be a NULL call through the split (the vtable after its name is function pointers only). */
static void check_vtable(pith_backend *split_be, pith_backend *cpu) {
    typedef void (*fn)(void);
    enum { N = (sizeof(pith_backend_vt) - offsetof(pith_backend_vt, destroy)) / sizeof(fn) };
    fn a[N], b[N];
    memcpy(a, (const char *)split_be->vt + offsetof(pith_backend_vt, destroy), sizeof a);
    memcpy(b, (const char *)cpu->vt + offsetof(pith_backend_vt, destroy), sizeof b);
    /* where NULL means "not here" (the model refuses at load): MLA, the MTP heads' ops, the vision
     * encoders' (which run on a CPU backend of their own), DeepStack's rows (Qwen3-VL refuses a backend
     * without add_embed_part) */
    const size_t optional[] = {offsetof(pith_backend_vt, mla),           offsetof(pith_backend_vt, mtp_mla),
                               offsetof(pith_backend_vt, set_draft),     offsetof(pith_backend_vt, mtp_input),
                               offsetof(pith_backend_vt, mtp_save),      offsetof(pith_backend_vt, mtp_attention),
                               offsetof(pith_backend_vt, mtp_logits),    offsetof(pith_backend_vt, mtp_pick),
                               offsetof(pith_backend_vt, set_rows),      offsetof(pith_backend_vt, layernorm),
                               offsetof(pith_backend_vt, add_rows),      offsetof(pith_backend_vt, span_attention),
                               offsetof(pith_backend_vt, pool_avg),      offsetof(pith_backend_vt, rope_rows),
                               offsetof(pith_backend_vt, group_rows),    offsetof(pith_backend_vt, add_embed_part)};
    for (int i = 0; i < N; i++) {
        size_t at = offsetof(pith_backend_vt, destroy) + (size_t)i * sizeof(fn);
        bool opt = false;
        for (size_t k = 0; k < sizeof optional / sizeof *optional; k++) opt = opt || at == optional[k];
        CHECKF(opt || !b[i] || a[i], "vtable entry at byte %zu: the CPU backend has it, the split not", at);
    }
}

int main(void) {
    check_parse();
    if (!usable_device()) return check_summary("test_backend_split") ? 1 : CHECK_SKIP;
    check_choices();
    check_memory();
    check_wrong_side();
    pith_backend *be = make("vulkan", "1", 0, NULL, 0), *cpu = make("cpu", NULL, 0, NULL, 0);
    CHECK(be && cpu);
    if (be && cpu) check_vtable(be, cpu);
    pith_backend_free(be);
    pith_backend_free(cpu);
    return check_summary("test_backend_split");
}
