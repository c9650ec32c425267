// What every shader shares: the buffer types it reaches through device addresses (push constants carry
// the addresses; no descriptor sets), and the step buffer's layout (vk.h: the same numbers).
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32 { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16 { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32 { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U64 { uint64_t v[]; };

// The step buffer: a header of int32, then the arrays it points at (offsets in int32 units).
#define ST_N_TOKENS 0
#define ST_N_SEQS 1
#define ST_TOKENS 2
#define ST_POSITIONS 3
#define ST_SEQ 4
#define ST_N_KEPT 5
#define ST_KEPT 6
#define ST_HIDDEN_SRC 7
#define ST_LOGIT_SRC 8
#define ST_N_LOGITS 9
#define ST_N_HIDDEN 10
#define ST_DRAFT 11 // an MTP draft's tokens [n_seqs][n_steps] (vk_mtp.c)
#define ST_GROUP 16  // + 4 * g: the group's slots, block tables, max_blocks
#define ST_SLOTS 0
#define ST_TABLES 1
#define ST_MAX_BLOCKS 2
// An MTP draft keeps the K/V of its positions as float32 rows of kv_dim, MTP_MAX_STEPS per sequence
// (backend.h: PITH_BE_MTP_MAX_STEPS): sequence s's draft position p0 + i at row s * MTP_MAX_STEPS + i.
#define MTP_MAX_STEPS 16u

// A dispatch wider than 65535 workgroups spreads over y (the portable limit of x).
uint flat_group() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

float f16_at(U16 b, uint i) { return unpackHalf2x16(uint(b.v[i])).x; }
float bf16_at(U16 b, uint i) { return uintBitsToFloat(uint(b.v[i]) << 16); }
// byte i of a run of 16-bit words (little-endian)
uint byte_at(U16 b, uint i) { uint h = uint(b.v[i >> 1]); return (i & 1u) != 0u ? h >> 8 : h & 0xFFu; }
int sbyte(uint x) { return int(x << 24) >> 24; }
