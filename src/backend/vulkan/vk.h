/* The Vulkan backend's own state (backend.h's interface on Vulkan compute). Only src/backend/vulkan/
 * includes this header (and through it vulkan.h).
 *
 * How a step runs: set_step writes the batch's per-step data into the step buffer (host-visible: a
 * header of offsets, then tokens, positions, sequence ids, each KV group's slots and block tables, and
 * the row lists of the head) and begins a command buffer; every op records one or more compute
 * dispatches into it (a pipeline, push constants that hold device addresses and shape constants, the
 * dispatch, a barrier), reading per-step data only from the step buffer; head records the final norm,
 * the vocabulary product into host-visible logits, submits, waits, and copies the logits and hidden
 * rows out. Shaders reach every buffer by its device address (VK_KHR_buffer_device_address, core in
 * 1.2): no descriptor sets.
 *
 * Replay: a step whose shape (tokens, sequences, rows that want logits or hidden states; not the block
 * tables' width, which the shaders read from the step buffer) matches one recorded before submits the
 * command buffer recorded then (its op sequence and arguments are those of the same shape, backend.h's
 * invariant; what differs lives in the step buffer). PITH_VK_REPLAY=0 records every step.
 *
 * Invariants: every buffer is allocated with a device address; weights never move after load; the
 * activation buffers move only in reserve and the pools in mem_alloc (both drop the recorded steps, as
 * does growing the step, logits or hidden buffers); the step buffer is written
 * only while no submitted work is in flight (head waits for its step). */
#ifndef PITH_VK_H
#define PITH_VK_H

#include <stdbool.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#include "backend/backend.h"
#include "backend/vulkan/shader_list.h"
#include "pith/kv.h"

/* The step buffer's header (shaders/common.glsl: the same numbers) */
enum {
    VK_ST_N_TOKENS = 0, VK_ST_N_SEQS = 1, VK_ST_TOKENS = 2, VK_ST_POSITIONS = 3, VK_ST_SEQ = 4, VK_ST_N_KEPT = 5,
    VK_ST_KEPT = 6, VK_ST_HIDDEN_SRC = 7, VK_ST_LOGIT_SRC = 8, VK_ST_N_LOGITS = 9, VK_ST_N_HIDDEN = 10, VK_ST_DRAFT = 11, VK_ST_GROUP = 16, VK_ST_HEADER = 16 + 4 * PITH_MAX_MEM_GROUPS,
};
/* A RECURRENT group's four entries at VK_ST_GROUP + 4 g (shaders/recurrent.glsl: the same numbers) */
enum { VK_RST_STATE_SLOTS = 0, VK_RST_CHECKPOINTS = 1, VK_RST_SEQ_RUNS = 3 };

typedef struct vk_mem {
    VkBuffer buf;
    VkDeviceMemory mem;
    VkDeviceAddress addr;
    VkDeviceSize size;
    void *map;          /* host-visible memory: its mapping, else NULL */
    uint32_t heap;      /* the memory heap it was counted against (pith_vk.heap_used) */
    VkDeviceSize held;  /* the bytes counted there */
} vk_mem;

typedef struct vk_weight {
    pith_weight w;
    vk_mem mem;         /* the file's blocks as they are (matrices, tables) or float32 (vectors) */
    uint32_t row_words; /* 16-bit words per row */
    int wtype;          /* dequant.glsl's WT_* */
    float *owned;       /* a vector's host values (pith_weight.vec) */
} vk_weight;

typedef struct vk_buf {
    pith_buf b;
    vk_mem mem;
} vk_buf;

typedef struct vk_rope {           /* a RoPE kind's frequencies as fixed-point turns (rope.comp) */
    const pith_rope *key;
    int half;
    double first, last;            /* inv_freq[0], [half - 1]: a changed table is a new one */
    vk_mem freq;
} vk_rope;

typedef struct vk_group {
    vk_mem k, v;                   /* KV groups */
    vk_mem state;                  /* RECURRENT groups: meta.n_slots slots of meta.state_bytes (vk_recurrent.c) */
    pith_kv_cache meta;            /* shapes (k, v, state NULL): what batch_check and the ops read */
} vk_group;

typedef struct vk_moe vk_moe;    /* vk_moe.c: the MoE layers and their scratch rows */

#define VK_MAX_ROPES 8
#define VK_MAX_RECORDED 16

typedef struct vk_recorded {       /* a step's command buffer, replayed for steps of the same shape */
    VkCommandBuffer cmd;
    int n_tokens, n_seqs, n_kept, n_hidden, n_logits;
    int draft_steps;               /* an MTP draft's (0: a forward) */
    bool draft_logits;             /* the draft hands out its logits */
    unsigned long long uses;
} vk_recorded;

typedef struct pith_vk {
    pith_backend base;
    VkInstance inst;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    VkPhysicalDeviceMemoryProperties memprops;
    /* Bytes this backend holds in each heap, and the largest single allocation the device takes: an
     * allocation past either is refused with the sizes before the driver is asked (a driver may
     * overcommit and fail later, or not at all until the memory is touched). */
    VkDeviceSize heap_used[VK_MAX_MEMORY_HEAPS];
    VkDeviceSize max_alloc;
    VkDeviceSize heap_cap;         /* PITH_VK_MEMORY: every heap taken as at most this (0: none), to
                                      share a device or to check that what does not fit is refused */
    VkPhysicalDeviceProperties props;
    VkCommandPool pool;
    VkCommandBuffer once;          /* uploads, copies: recorded and waited for at once */
    VkFence fence;
    VkPipelineLayout layout;
    VkPipelineCache cache;
    VkPipeline pipes[PITH_VK_N_SHADERS];
    uint32_t max_groups_x;         /* maxComputeWorkGroupCount[0] */
    uint32_t subgroup;             /* the subgroup size the device reports (1..64) */

    vk_mem staging;                /* uploads to memory the host cannot map */

    vk_weight **weights;
    int n_weights;
    vk_buf **bufs;
    int n_bufs;
    int cap;                       /* rows every buffer holds */

    bool has_shape;
    pith_be_attn_shape shape;
    vk_rope ropes[VK_MAX_ROPES];
    int n_ropes;

    bool mem_allocated;
    int n_groups;
    vk_group groups[PITH_MAX_MEM_GROUPS];
    pith_kv_host meta;             /* the groups' shapes as pith_kv_host, for batch_check */

    /* the step */
    vk_mem step;                   /* host-visible: header and arrays (int32) */
    size_t step_cap;               /* int32 entries */
    vk_mem logits;                 /* host-visible [n_logits][n_vocab] */
    vk_mem hidden;                 /* host-visible [n_hidden][widest buffer] */
    VkCommandBuffer scratch_cmd;   /* a step recorded but not kept */
    bool keep_recording;           /* the step being recorded goes into rec[] */
    const pith_batch *b;
    float *out_logits;
    int n_vocab, n_kept, n_hidden, n_logits;
    VkCommandBuffer cmd;           /* the step's: recording (replaying false) or replayed */
    bool recording, replaying;
    vk_recorded rec[VK_MAX_RECORDED];
    int n_rec;
    bool replay;                   /* PITH_VK_REPLAY (default on) */
    /* Which product kernels (PITH_VK_MATMUL: auto, rows, tiles): per (row, token) invocations, or the
     * subgroup matrix-vector kernel for decode and the tiled one for prefill. auto: by row on a CPU
     * device (lavapipe: its lanes are SIMD lanes, and shared memory and barriers cost it more than they
     * save), else the other two. Every kernel adds in the same order: the choice never changes a bit. */
    enum { VK_MATMUL_AUTO, VK_MATMUL_PER_ROW, VK_MATMUL_TILED } matmul_kind;
    bool cpu_device;               /* VK_PHYSICAL_DEVICE_TYPE_CPU */
    unsigned long long steps, replays;

    /* PITH_VK_PROFILE=1: a timestamp after every dispatch of a recorded step, the time between each
     * and the one before summed per shader and printed when the backend is destroyed */
    bool profile;
    VkQueryPool queries;
    uint32_t n_queries;
    pith_vk_shader query_shader[4096];
    double shader_ms[PITH_VK_N_SHADERS];
    unsigned long long shader_calls[PITH_VK_N_SHADERS];

    int gdn_dk, gdn_dv;            /* DeltaNet heads as gdn_shape declared them (0: none) */
    vk_moe *moe;                   /* NULL until a MoE layer loads */

    /* An MTP draft (vk_mtp.c; set_draft to the last step's mtp_logits, recorded and replayed as a step):
     * the K/V of its positions (device, float32 rows of kv_dim, PITH_BE_MTP_MAX_STEPS per sequence),
     * its RoPE tables, and where its tokens and logits go. */
    int draft_steps;               /* 0: no draft */
    vk_mem draft_k, draft_v, draft_cs;
    int32_t *draft_out;
    float *draft_logits_out;

    int op_failed;                 /* an op could not record (its reason in op_err): head fails the step */
    char op_err[512];
} pith_vk;

static inline pith_vk *pith_vk_of(pith_backend *be) { return (pith_vk *)be; }

/* vk_device.c */
int pith_vk_open(pith_vk *c, int device, pith_err *err);
void pith_vk_close(pith_vk *c);
/* Allocates a buffer of size bytes (host: host-visible and mapped, else device-local), with its device
 * address. */
int pith_vk_alloc(pith_vk *c, VkDeviceSize size, bool host, vk_mem *m, pith_err *err);
void pith_vk_free(pith_vk *c, vk_mem *m);
/* Copies bytes into m at offset (mapped: memcpy; else through the staging buffer, waited for). */
int pith_vk_upload(pith_vk *c, vk_mem *m, VkDeviceSize offset, const void *src, size_t bytes, pith_err *err);
int pith_vk_download(pith_vk *c, const vk_mem *m, VkDeviceSize offset, void *dst, size_t bytes, pith_err *err);
/* Records into c->once, submits and waits: fill with zeros, or copy regions between buffers. */
int pith_vk_fill_zero(pith_vk *c, vk_mem *m, pith_err *err);
int pith_vk_copy_regions(pith_vk *c, const vk_mem *src, const vk_mem *dst, const VkBufferCopy *r, uint32_t n,
                         pith_err *err);
/* The pipeline of a shader, made at first use. */
VkPipeline pith_vk_pipeline(pith_vk *c, pith_vk_shader s, pith_err *err);
/* Records a dispatch of s into cmd with these push constants over gx (spread over y past the device's x
 * limit) x gy workgroups, then a barrier that makes its writes visible to the next dispatch. */
int pith_vk_dispatch(pith_vk *c, VkCommandBuffer cmd, pith_vk_shader s, const void *push, uint32_t push_size,
                     uint32_t gx, uint32_t gy, pith_err *err);
/* Submits cmd and waits for it. */
int pith_vk_submit_wait(pith_vk *c, VkCommandBuffer cmd, pith_err *err);
const char *pith_vk_result(VkResult r);
/* PITH_VK_PROFILE: begin a recorded step's timestamps; after its wait, add them up; print the sums. */
int pith_vk_profile_begin(pith_vk *c, VkCommandBuffer cmd, pith_err *err);
void pith_vk_profile_end(pith_vk *c);
void pith_vk_profile_print(const pith_vk *c);

/* backend_vulkan.c: what the other files record through. A step: reset (drops a step that never
 * ended), its per-step data (step_ints int32 of header and arrays, put into the step buffer by step_put,
 * which returns where the arrays end), begin (replays a recorded step of the same shape, else records),
 * then its ops, and end (submits the step and waits for it; the first op's fault fails it). */
bool pith_vk_recording(pith_vk *c);
void pith_vk_fail(pith_vk *c, const char *msg);
void pith_vk_record(pith_vk *c, pith_vk_shader s, const void *push, uint32_t size, uint32_t gx, uint32_t gy);
void pith_vk_matmul_rows(pith_vk *c, const pith_buf *in, const pith_weight *w, VkDeviceAddress out, int out_ld, int n);
int pith_vk_kvtype(pith_dtype t); /* kv.glsl's KV_* for a KV cache type, or -1 */
/* grows m to hold bytes (dropping the recorded steps, which hold its address) */
int pith_vk_grow(pith_vk *c, vk_mem *m, size_t bytes, bool host, pith_err *err);
int pith_vk_grow_host(pith_vk *c, vk_mem *m, size_t bytes, pith_err *err);
void pith_vk_step_reset(pith_vk *c);
size_t pith_vk_step_ints(const pith_vk *c, const pith_batch *b);
size_t pith_vk_step_put(const pith_vk *c, const pith_batch *b);
int pith_vk_step_begin(pith_vk *c, pith_err *err);
int pith_vk_step_end(pith_vk *c, pith_err *err);

static inline VkDeviceAddress pith_vk_buf_addr(const pith_buf *b) { return ((const vk_buf *)b)->mem.addr; }
static inline VkDeviceAddress pith_vk_weight_addr(const pith_weight *w) { return ((const vk_weight *)w->impl)->mem.addr; }
/* where layer layer_index of a KV group's K (or V) pool starts */
static inline VkDeviceAddress pith_vk_layer_base(const vk_mem *m, const pith_kv_cache *meta, int layer_index) {
    return m->addr + pith_kv_bytes(meta->type, pith_kv_k_offset(meta, layer_index, 0));
}

/* Push constants of the shaders more than one file records (the shaders' blocks: the same fields) */
typedef struct {                   /* embed.comp */
    uint64_t table, o, step;
    uint32_t row_words, cols, o_ld, n;
    float scale;
} vk_embed_push;

typedef struct {                   /* rope.comp */
    uint64_t freq, cs, step;
    uint32_t half, cs_ld, n;
    float mscale;
    int32_t pos_add;
} vk_rope_push;

typedef struct {                   /* qkv.comp */
    uint64_t q, k, v, qn, kn, cs, step, kc, vc;
    uint32_t q_ld, k_ld, v_ld, hd, heads, bs, kv_dim, flags, cs_ld, n;
    float eps;
} vk_qkv_push;

typedef struct {                   /* attention.comp (dk and the fields after it: the DRAFT variant's) */
    uint64_t q, o, sinks, kc, vc, step;
    uint32_t q_ld, o_ld, hd, heads, bs, kv_dim, window, flags, n;
    float scale;
    uint64_t dk, dv, gate;
    uint32_t gate_ld, dstep;
} vk_attn_push;

/* vk_mtp.c: the MTP head's draft and ops (backend.h: set_draft, mtp_*); the draft's memory is freed
 * with the backend */
int pith_vk_set_draft(pith_backend *be, const pith_batch *b, int n_vocab, int n_steps, int32_t *draft, float *logits,
                      pith_err *err);
void pith_vk_mtp_input(pith_backend *be, const pith_be_mtp_input_args *a, int n);
void pith_vk_mtp_save(pith_backend *be, const pith_be_mtp_save_args *a);
void pith_vk_mtp_attention(pith_backend *be, const pith_be_mtp_attn_args *a, int n);
int pith_vk_mtp_logits(pith_backend *be, const pith_be_mtp_logits_args *a, int n, pith_err *err);

/* vk_recurrent.c: RECURRENT groups' state (mem_alloc, copy_blocks, set_step's entries) and the mixers */
int pith_vk_recurrent_alloc(pith_vk *c, int g, const pith_mem_group *mg, int n_slots, pith_err *err);
int pith_vk_recurrent_copy(pith_vk *c, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err);
size_t pith_vk_recurrent_step_ints(const pith_batch *b);
size_t pith_vk_recurrent_step_put(const pith_batch *b, int g, int32_t *step, size_t at);
void pith_vk_short_conv(pith_backend *be, const pith_be_short_conv_args *a, int n);
void pith_vk_mamba2(pith_backend *be, const pith_be_mamba2_args *a, int n);
int pith_vk_gdn_shape(pith_backend *be, int dk, int dv, pith_err *err);
void pith_vk_gdn(pith_backend *be, const pith_be_gdn_args *a, int n);
void pith_vk_gated_norm(pith_backend *be, const pith_be_gated_norm_args *a, int n);
void pith_vk_gated_qkv(pith_backend *be, const pith_be_gated_qkv_args *a, int n);
void pith_vk_attn_gate(pith_backend *be, const pith_be_attn_gate_args *a, int n);
/* gate.comp: mode 0 copies each head's query half of qg into a, mode 1 multiplies a by the gate half */
void pith_vk_gate(pith_vk *c, const pith_buf *a, const pith_buf *qg, int mode, int n);
/* vk_moe.c: backend.h's moe_load and moe; the layers freed with the backend (their weights and buffers
 * are the backend's own) */
int pith_vk_moe_load(pith_backend *be, const pith_model_file *f, int layer, const pith_moe_config *cfg,
                     const char *const hf_experts[3], pith_moe_weights **out, pith_err *err);
int pith_vk_moe(pith_backend *be, const pith_moe_weights *w, const pith_buf *in, pith_buf *out, int n, pith_err *err);
void pith_vk_moe_free(pith_vk *c);

/* vk_rope.c: the frequencies of r as rope.comp reads them (made at first sight, kept) */
const vk_rope *pith_vk_rope(pith_vk *c, const pith_rope *r, pith_err *err);

/* vk_gemma4.c: the attention shapes (the second one for one group, Gemma 4's global layers) checked at
 * attn_shape, and the shape a group's layers attend with; the V norm (each of `heads` heads of hd in x
 * RMS-normed in place, no weight) and copy_cols, recorded into the step's command buffer. */
int pith_vk_check_shape(const pith_be_attn_shape *s, pith_err *err);
void pith_vk_group_shape(const pith_vk *c, int group, int *n_kv_heads, int *head_dim);
int pith_vk_head_norm(pith_vk *c, const pith_buf *x, int heads, int hd, float eps, int n, pith_err *err);
int pith_vk_copy_cols(pith_vk *c, pith_buf *dst, const pith_buf *src, int col0, int n, pith_err *err);

#endif
