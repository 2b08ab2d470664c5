/* Kiln's C API: a stable ABI over the runtime (libkiln.so) and the compiler
 * (libkiln_compiler.so). Plain C (C99 or later, or C++).
 *
 *   kiln_model* m = NULL;
 *   if (kiln_model_load("resnet18.kiln", NULL, &m) != KILN_OK) {
 *     fprintf(stderr, "%s\n", kiln_last_error_message());
 *     return 1;
 *   }
 *   int64_t in_shape[] = {1, 3, 224, 224}, out_shape[] = {1, 1000};
 *   kiln_tensor x = {input_data, KILN_DTYPE_FLOAT32, in_shape, 4, KILN_MEMORY_HOST};
 *   kiln_tensor y = {output_data, KILN_DTYPE_FLOAT32, out_shape, 2, KILN_MEMORY_HOST};
 *   kiln_model_bind_input(m, 0, &x);
 *   kiln_model_bind_output(m, 0, &y);
 *   kiln_model_execute(m);
 *   kiln_model_free(m);
 *
 * Rules:
 *  - Every call returns a kiln_status (KILN_OK = 0) except the plain queries
 *    marked otherwise. On failure, kiln_last_error_message() returns Kiln's
 *    message (naming file, node, input, expected vs found) until the next
 *    failing call on the same thread. No exception crosses this boundary.
 *  - Objects are opaque handles created by kiln_<object>_create/_load and
 *    released by kiln_<object>_free (NULL is accepted and ignored).
 *  - Strings returned by Kiln stay valid as long as the object they came
 *    from. Strings and arrays passed in are copied unless a call says it
 *    keeps a pointer (kiln_load_config_set_external_weight_address,
 *    kiln_load_config_set_weight_file_address, bound tensors).
 *  - One thread at a time per model and per session; different models may
 *    run on different threads.
 *  - ABI: additions only within one KILN_ABI_VERSION; enums carry every
 *    ONNX element type, symbolic dims with ranges and device kinds already.
 *  - Functions under "compiler" live in libkiln_compiler.so (link
 *    Kiln::compiler / pkg-config kiln-compiler); the rest in libkiln.so.
 */
#ifndef KILN_KILN_C_H_
#define KILN_KILN_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KILN_C_EXPORT __attribute__((visibility("default")))
#else
#define KILN_C_EXPORT
#endif

/* The ABI this header describes; kiln_abi_version() is the library's.
 * Every enum has a *_FORCE_INT_ member: its type is int-sized and any int
 * value passed in is well defined (and refused where it means nothing). */
#define KILN_ABI_VERSION 1u

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_INVALID_ARGUMENT = 1, /* the caller passed something wrong */
  KILN_NOT_FOUND = 2,        /* file, input, op or attribute does not exist */
  KILN_UNIMPLEMENTED = 3,    /* valid input Kiln does not support (yet) */
  KILN_IO_ERROR = 4,         /* OS-level read/write failure */
  KILN_CORRUPT = 5,          /* a file failed verification */
  KILN_OUT_OF_RANGE = 6,     /* an index or size outside its bounds */
  KILN_INTERNAL = 7,         /* a Kiln bug */
  KILN_STATUS_FORCE_INT_ = 0x7fffffff
} kiln_status;

/* Element types, numbered as ONNX's TensorProto.DataType. */
typedef enum kiln_dtype {
  KILN_DTYPE_UNDEFINED = 0,
  KILN_DTYPE_FLOAT32 = 1,
  KILN_DTYPE_UINT8 = 2,
  KILN_DTYPE_INT8 = 3,
  KILN_DTYPE_UINT16 = 4,
  KILN_DTYPE_INT16 = 5,
  KILN_DTYPE_INT32 = 6,
  KILN_DTYPE_INT64 = 7,
  KILN_DTYPE_STRING = 8,
  KILN_DTYPE_BOOL = 9,
  KILN_DTYPE_FLOAT16 = 10,
  KILN_DTYPE_FLOAT64 = 11,
  KILN_DTYPE_UINT32 = 12,
  KILN_DTYPE_UINT64 = 13,
  KILN_DTYPE_COMPLEX64 = 14,
  KILN_DTYPE_COMPLEX128 = 15,
  KILN_DTYPE_BFLOAT16 = 16,
  KILN_DTYPE_FLOAT8E4M3FN = 17,
  KILN_DTYPE_FLOAT8E4M3FNUZ = 18,
  KILN_DTYPE_FLOAT8E5M2 = 19,
  KILN_DTYPE_FLOAT8E5M2FNUZ = 20,
  KILN_DTYPE_UINT4 = 21,
  KILN_DTYPE_INT4 = 22,
  KILN_DTYPE_FORCE_INT_ = 0x7fffffff
} kiln_dtype;

/* Where a bound buffer lives: host memory (copied to and from the model's
 * device around each run where that device cannot use host memory) or the
 * model's device memory (bound in place, by address refresh). */
typedef enum kiln_memory {
  KILN_MEMORY_HOST = 0,
  KILN_MEMORY_DEVICE = 1,
  KILN_MEMORY_FORCE_INT_ = 0x7fffffff
} kiln_memory;

/* Device kinds; a device is named by a string ("cpu", "sim", "sim:seed=3",
 * "cuda:0"), whose kind kiln_device_kind_of() tells. */
typedef enum kiln_device_kind {
  KILN_DEVICE_UNKNOWN = 0,
  KILN_DEVICE_CPU = 1,
  KILN_DEVICE_SIM = 2,
  KILN_DEVICE_CUDA = 3,
  KILN_DEVICE_FORCE_INT_ = 0x7fffffff
} kiln_device_kind;

typedef enum kiln_weight_load_mode {
  KILN_WEIGHTS_AUTO = 0,       /* map where the device can use host memory, else copy */
  KILN_WEIGHTS_MAP = 1,        /* map read-only and use in place */
  KILN_WEIGHTS_COPY = 2,       /* read in chunks into device memory */
  KILN_WEIGHTS_STAGED_COPY = 3, /* through staging buffers, reads overlapping copies */
  KILN_WEIGHTS_FORCE_INT_ = 0x7fffffff
} kiln_weight_load_mode;

/* One dim of a described tensor. A fixed dim has value = min = max. A dim
 * that is not fixed has value -1, its admissible range [min, max] (max: the
 * bound a buffer must allow for; -1 where unbounded). `symbol`: the model's
 * name for the dim ("batch", from an ONNX dim_param; NULL if none); a model
 * compiled with the dim fixed (--input-shape) keeps the name, with
 * value = min = max = that extent. */
typedef struct kiln_dim {
  int64_t value;
  int64_t min;
  int64_t max;
  const char* symbol;
} kiln_dim;

/* An input or output of a model. `bytes`: the buffer to bind (for dims that
 * are not fixed, at their max). Pointers stay valid while the model lives. */
typedef struct kiln_tensor_info {
  const char* name;
  kiln_dtype dtype;
  size_t rank;
  const kiln_dim* dims;
  size_t bytes;
} kiln_tensor_info;

/* A caller-owned buffer with its type and shape (checked against the
 * model's). Kiln never frees it; it must stay valid while it is bound and a
 * run using it may be in flight. */
typedef struct kiln_tensor {
  void* data;
  kiln_dtype dtype;
  const int64_t* shape;
  size_t rank;
  kiln_memory memory;
} kiln_tensor;

typedef struct kiln_external_weight {
  const char* path; /* relative to the weight directory */
  uint64_t size;
  uint64_t offset;
  const char* id; /* SHA-256, hex */
} kiln_external_weight;

typedef struct kiln_weight_stats {
  uint64_t bytes_read;
  uint64_t bytes_mapped;
  uint64_t files_opened;
  uint64_t weights_shared;
  uint64_t resident_bytes;
} kiln_weight_stats;

typedef struct kiln_compile_options kiln_compile_options;
typedef struct kiln_summary kiln_summary;
typedef struct kiln_load_config kiln_load_config;
typedef struct kiln_model kiln_model;
typedef struct kiln_stream kiln_stream;
typedef struct kiln_session kiln_session;

/* ---- library ---- */
KILN_C_EXPORT uint32_t kiln_abi_version(void);
KILN_C_EXPORT const char* kiln_version_string(void); /* "0.1.0" */
/* Message of the last failing call on this thread ("" if none). */
KILN_C_EXPORT const char* kiln_last_error_message(void);
KILN_C_EXPORT const char* kiln_status_name(kiln_status status);
/* "float32", "bfloat16", ...; "undefined" for values outside the enum. */
KILN_C_EXPORT const char* kiln_dtype_name(kiln_dtype dtype);
/* Bytes per element; 0 for types without a fixed byte size (string, int4). */
KILN_C_EXPORT size_t kiln_dtype_size(kiln_dtype dtype);
KILN_C_EXPORT kiln_device_kind kiln_device_kind_of(const char* device);
/* Whether `device` can be opened here; if not, the reason is the message. */
KILN_C_EXPORT kiln_status kiln_device_check(const char* device);

/* ---- compiler (libkiln_compiler.so) ---- */
KILN_C_EXPORT kiln_status kiln_compile_options_create(kiln_compile_options** out);
KILN_C_EXPORT void kiln_compile_options_free(kiln_compile_options* options);
/* 0 embedded, 1 one file per weight (weight_<sha256>), 2 one combined file. */
KILN_C_EXPORT kiln_status kiln_compile_options_set_external_weight(kiln_compile_options* options, int mode);
/* Where external weights go; unset: <output dir>/weight, through a temporary. */
KILN_C_EXPORT kiln_status kiln_compile_options_set_external_weight_dir(kiln_compile_options* options, const char* dir);
/* Fixes the dims of input `name` (-1 leaves a dim as the model has it). */
KILN_C_EXPORT kiln_status kiln_compile_options_set_input_shape(kiln_compile_options* options, const char* name,
                                                              const int64_t* dims, size_t rank);
/* Shapes, ranges and gears in the CLI's --input-shape grammar:
 * "ids:1..8,1..512;mask:1..8,1..512" bounds symbolic dims (memory is planned
 * for the largest), "ids:1,128|4,512" lists gears (signatures planned at
 * load; without a range, the only ones admitted). Replaces what an earlier
 * call set for the inputs it names; a parse error names the bad part. */
KILN_C_EXPORT kiln_status kiln_compile_options_set_input_spec(kiln_compile_options* options, const char* spec);
KILN_C_EXPORT kiln_status kiln_compile_options_set_target(kiln_compile_options* options, const char* device);
KILN_C_EXPORT kiln_status kiln_compile_options_set_model_name(kiln_compile_options* options, const char* name);
/* Compiles an ONNX file into `output` (written atomically) and, with external
 * weights, the weight store. `summary` may be NULL. Custom-op packages under
 * $KILN_CUSTOM_OP_PATH are loaded first. */
KILN_C_EXPORT kiln_status kiln_compile(const char* onnx_path, const char* output,
                                      const kiln_compile_options* options, kiln_summary** summary);

/* ---- compile summary ---- */
KILN_C_EXPORT void kiln_summary_free(kiln_summary* summary);
KILN_C_EXPORT size_t kiln_summary_num_nodes(const kiln_summary* summary);
KILN_C_EXPORT uint64_t kiln_summary_arena_bytes(const kiln_summary* summary);
KILN_C_EXPORT uint64_t kiln_summary_embedded_weight_bytes(const kiln_summary* summary);
KILN_C_EXPORT const char* kiln_summary_weight_dir(const kiln_summary* summary);
KILN_C_EXPORT size_t kiln_summary_external_weight_count(const kiln_summary* summary);
KILN_C_EXPORT kiln_status kiln_summary_external_weight(const kiln_summary* summary, size_t index,
                                                      kiln_external_weight* out);

/* ---- load configuration ---- */
KILN_C_EXPORT kiln_status kiln_load_config_create(kiln_load_config** out);
KILN_C_EXPORT void kiln_load_config_free(kiln_load_config* config);
/* "cpu" (default: $KILN_DEVICE, else cpu), "sim", "cuda:0", ... */
KILN_C_EXPORT kiln_status kiln_load_config_set_device(kiln_load_config* config, const char* device);
KILN_C_EXPORT kiln_status kiln_load_config_set_threads(kiln_load_config* config, int threads);
/* A model with symbolic dims or shape inputs makes a plan per input
 * signature and caches at most `max_plans` (>= 1; default 8) holding at most
 * `max_bytes` of arenas in all (0: no bound), dropping the least recently
 * used. */
KILN_C_EXPORT kiln_status kiln_load_config_set_plan_cache(kiln_load_config* config, size_t max_plans,
                                                          uint64_t max_bytes);
/* Default: the directory the .kiln records (relative to itself), else
 * <model dir>/weight. */
KILN_C_EXPORT kiln_status kiln_load_config_set_weight_dir(kiln_load_config* config, const char* dir);
/* Use a recorded weight directory outside the model's own directory (refused
 * by default, naming it: a .kiln from a stranger must not pick what Kiln
 * reads). */
KILN_C_EXPORT kiln_status kiln_load_config_set_trust_recorded_weight_dir(kiln_load_config* config, int trust);
KILN_C_EXPORT kiln_status kiln_load_config_set_weight_load_mode(kiln_load_config* config, kiln_weight_load_mode mode);
KILN_C_EXPORT kiln_status kiln_load_config_set_verify_weights(kiln_load_config* config, int verify);
/* Use `size` bytes at `data` (filled by the caller; kept, never freed; must
 * outlive every model loaded with this configuration) as the contents of
 * weight file `file_name`. */
KILN_C_EXPORT kiln_status kiln_load_config_set_external_weight_address(kiln_load_config* config,
                                                                      const char* file_name, void* data,
                                                                      size_t size);
/* FileConstants made by the graph API with a file_id (Graph::AddFileConstant)
 * read their bytes from what these give for that id: a file (`path`, used as
 * given) or `size` bytes at `data` filled by the caller (kept, as above). A
 * compiled model that needs an id not given fails to load naming it. */
KILN_C_EXPORT kiln_status kiln_load_config_set_weight_file(kiln_load_config* config, const char* file_id,
                                                           const char* path);
KILN_C_EXPORT kiln_status kiln_load_config_set_weight_file_address(kiln_load_config* config, const char* file_id,
                                                                   void* data, size_t size);

/* ---- model ---- */
/* `config` may be NULL (defaults). */
KILN_C_EXPORT kiln_status kiln_model_load(const char* path, const kiln_load_config* config, kiln_model** out);
/* A .kiln image in memory (copied; the caller may free it on return).
 * External weights come from the configuration's weight directory or
 * registered addresses. */
KILN_C_EXPORT kiln_status kiln_model_load_from_memory(const void* data, size_t size, const kiln_load_config* config,
                                                     kiln_model** out);
KILN_C_EXPORT void kiln_model_free(kiln_model* model);
KILN_C_EXPORT size_t kiln_model_input_count(const kiln_model* model);
KILN_C_EXPORT size_t kiln_model_output_count(const kiln_model* model);
KILN_C_EXPORT kiln_status kiln_model_input_info(const kiln_model* model, size_t index, kiln_tensor_info* out);
KILN_C_EXPORT kiln_status kiln_model_output_info(const kiln_model* model, size_t index, kiln_tensor_info* out);
/* `*out` = 1 when input `index`'s values decide shapes (a Reshape's target,
 * Slice's starts, ... fed as a model input): a run reads them on the host
 * (bind it in host memory), and output shapes follow them
 * (kiln_model_output_shape_for_inputs); else 0. */
KILN_C_EXPORT kiln_status kiln_model_input_is_shape_input(const kiln_model* model, size_t index, int* out);
/* `*count` = the number of shapes output `index` may take when its rank
 * depends on the data (an If whose branches yield different ranks): its
 * described rank and dims are those of the largest (bind a buffer of
 * `bytes`), and kiln_model_output_shape gives each run's rank and dims.
 * 0 for an output of fixed rank. */
KILN_C_EXPORT kiln_status kiln_model_output_rank_alternatives(const kiln_model* model, size_t index, size_t* count);
/* Binds a caller buffer to input/output `index` (checked at the next run);
 * a buffer whose address changed since the last run is rebound by address
 * refresh, nothing is copied. */
KILN_C_EXPORT kiln_status kiln_model_bind_input(kiln_model* model, size_t index, const kiln_tensor* tensor);
KILN_C_EXPORT kiln_status kiln_model_bind_output(kiln_model* model, size_t index, const kiln_tensor* tensor);
/* Runs on the bound buffers and returns when the outputs are written. */
KILN_C_EXPORT kiln_status kiln_model_execute(kiln_model* model);
/* Queues the run on `stream` and returns; buffers must stay valid until
 * kiln_stream_synchronize. */
KILN_C_EXPORT kiln_status kiln_model_execute_async(kiln_model* model, kiln_stream* stream);
/* Runs on the bound inputs with outputs in host memory Kiln allocates
 * (bound outputs are not used): kiln_model_run_output gives each. The
 * buffers are reused and grown run to run (outputs whose bounds a run
 * raised are allocated again and the run repeated). */
KILN_C_EXPORT kiln_status kiln_model_run(kiln_model* model);
/* Output `index` of the last kiln_model_run: its memory, dtype and actual
 * shape (host memory Kiln owns; `out->shape` points into the model). Valid
 * until the next kiln_model_run or kiln_model_free. */
KILN_C_EXPORT kiln_status kiln_model_run_output(const kiln_model* model, size_t index, kiln_tensor* out);
/* Output `index`'s shape in the last completed run (differs from the
 * described one where dims are not fixed). `rank` receives the rank; up to
 * `capacity` dims are written. */
KILN_C_EXPORT kiln_status kiln_model_output_shape(const kiln_model* model, size_t index, int64_t* dims,
                                                 size_t capacity, size_t* rank);
/* Output `index`'s shape for the input buffers bound now (every input must
 * be bound): for a model with symbolic input dims (kiln_dim value -1), the
 * shape to allocate that output with before kiln_model_execute. Makes (or
 * finds) the plan for those input shapes, and for the values of inputs
 * whose values decide shapes (read from the bound host buffers, as a run
 * reads them); errors name the input, dim and symbol, as a run's would.
 * An output whose extents follow from a value the run computes with no
 * bound the model proves (kiln_dim max -1 on a data-dependent dim) is
 * planned for a provisional bound: a run above it raises the bound and
 * fails if the bound outputs are too small for it (an error naming the
 * raised value); this call then gives the raised shape: bind outputs of
 * that shape and run again. */
KILN_C_EXPORT kiln_status kiln_model_output_shape_for_inputs(kiln_model* model, size_t index, int64_t* dims,
                                                             size_t capacity, size_t* rank);

/* ---- stream ---- */
/* `device` NULL or "": the default device. */
KILN_C_EXPORT kiln_status kiln_stream_create(const char* device, kiln_stream** out);
/* Waits for queued work; returns the first error of any of it. */
KILN_C_EXPORT kiln_status kiln_stream_synchronize(kiln_stream* stream);
KILN_C_EXPORT void kiln_stream_free(kiln_stream* stream);

/* ---- session: models and graphs sharing external weights ---- */
/* `options` (external weights for graphs compiled in the session; may be
 * NULL) and `config` (how the session's graphs load; may be NULL) are copied. */
KILN_C_EXPORT kiln_status kiln_session_create(const kiln_compile_options* options, const kiln_load_config* config,
                                             kiln_session** out);
/* Frees the session; models loaded through it stay valid. */
KILN_C_EXPORT void kiln_session_free(kiln_session* session);
KILN_C_EXPORT kiln_status kiln_session_load_model(kiln_session* session, const char* path,
                                                 const kiln_load_config* config, kiln_model** out);
KILN_C_EXPORT kiln_status kiln_session_weight_stats(const kiln_session* session, kiln_weight_stats* out);
/* Graphs (compiler): an ONNX file imported as a graph of the session (input
 * shapes from the session's compile options). */
KILN_C_EXPORT kiln_status kiln_session_add_graph(kiln_session* session, const char* onnx_path, uint32_t* id);
KILN_C_EXPORT kiln_status kiln_session_compile_graph(kiln_session* session, uint32_t id);
/* Records the graph's work once; `stream` may be NULL. */
KILN_C_EXPORT kiln_status kiln_session_load_graph(kiln_session* session, uint32_t id, kiln_stream* stream);
KILN_C_EXPORT kiln_status kiln_session_execute_graph(kiln_session* session, uint32_t id, const kiln_tensor* inputs,
                                                    size_t num_inputs, const kiln_tensor* outputs,
                                                    size_t num_outputs);
KILN_C_EXPORT kiln_status kiln_session_execute_graph_async(kiln_session* session, uint32_t id, kiln_stream* stream,
                                                          const kiln_tensor* inputs, size_t num_inputs,
                                                          const kiln_tensor* outputs, size_t num_outputs);
KILN_C_EXPORT kiln_status kiln_session_graph_summary(const kiln_session* session, uint32_t id, kiln_summary** out);
KILN_C_EXPORT kiln_status kiln_session_remove_graph(kiln_session* session, uint32_t id);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* KILN_KILN_C_H_ */
