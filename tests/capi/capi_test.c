/* Every call of Kiln's C API (include/kiln/kiln_c.h), from C. Models are
 * written by make_models.py; expected values are derived by hand:
 *   add.onnx:    y = x + w,            w[i] = 0.5 i
 *   custom.onnx: y = 2 (x + w)         (PkgDouble from the test package,
 *                                       found through $KILN_CUSTOM_OP_PATH)
 *   batch.onnx:  add.onnx with x's dim 0 named "batch" (dim_param)
 * Usage: capi_test MODEL_DIR WORK_DIR   (prints ALL-OK at the end)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln_c.h"

static int failures = 0;
static char model_dir[1024], work_dir[1024];

#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                             \
    }                                                                         \
  } while (0)

#define OK(call)                                                                                   \
  do {                                                                                             \
    kiln_status st_ = (call);                                                                      \
    if (st_ != KILN_OK) {                                                                          \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, kiln_status_name(st_), \
              kiln_last_error_message());                                                          \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

/* A call that must fail with `code` and a message containing `needle`. */
#define FAILS(call, code, needle)                                                                      \
  do {                                                                                                 \
    kiln_status st_ = (call);                                                                          \
    if (st_ != (code) || !strstr(kiln_last_error_message(), (needle))) {                               \
      fprintf(stderr, "%s:%d: %s -> %s '%s', expected %s with '%s'\n", __FILE__, __LINE__, #call,       \
              kiln_status_name(st_), kiln_last_error_message(), kiln_status_name(code), (needle));      \
      ++failures;                                                                                      \
    }                                                                                                  \
  } while (0)

static const char* path(char* buf, const char* dir, const char* name) {
  snprintf(buf, 1024, "%s/%s", dir, name);
  return buf;
}

static void* read_all(const char* file, size_t* size) {
  FILE* f = fopen(file, "rb");
  void* data;
  long n;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  data = malloc(n > 0 ? (size_t)n : 1);
  *size = fread(data, 1, (size_t)n, f);
  fclose(f);
  return data;
}

static const int64_t kShape[2] = {2, 3};
static float x_data[6] = {1, -2, 3, -4, 5, -6};

/* y must equal scale * (x + 0.5 i). */
static void check_output(const float* y, float scale, int line) {
  int i;
  for (i = 0; i < 6; ++i) {
    float want = scale * (x_data[i] + 0.5f * (float)i);
    if (fabsf(y[i] - want) > 1e-6f) {
      fprintf(stderr, "line %d: y[%d] = %g, expected %g\n", line, i, y[i], want);
      ++failures;
      return;
    }
  }
}

static void library_queries(void) {
  CHECK(kiln_abi_version() == KILN_ABI_VERSION);
  CHECK(strcmp(kiln_version_string(), "0.1.0") == 0);
  CHECK(strcmp(kiln_status_name(KILN_CORRUPT), "CORRUPT") == 0);
  CHECK(strcmp(kiln_dtype_name(KILN_DTYPE_BFLOAT16), "bfloat16") == 0);
  CHECK(strcmp(kiln_dtype_name(KILN_DTYPE_FLOAT8E5M2), "float8e5m2") == 0);
  CHECK(strcmp(kiln_dtype_name((kiln_dtype)99), "undefined") == 0);
  CHECK(kiln_dtype_size(KILN_DTYPE_FLOAT16) == 2);
  CHECK(kiln_dtype_size(KILN_DTYPE_INT64) == 8);
  CHECK(kiln_dtype_size(KILN_DTYPE_COMPLEX128) == 16);
  CHECK(kiln_dtype_size(KILN_DTYPE_INT4) == 0);
  CHECK(kiln_device_kind_of("cpu") == KILN_DEVICE_CPU);
  CHECK(kiln_device_kind_of("sim:seed=3") == KILN_DEVICE_SIM);
  CHECK(kiln_device_kind_of("cuda:0") == KILN_DEVICE_CUDA);
  CHECK(kiln_device_kind_of("tpu") == KILN_DEVICE_UNKNOWN);
  OK(kiln_device_check("cpu"));
  OK(kiln_device_check("sim"));
  FAILS(kiln_device_check("no-such-device"), KILN_INVALID_ARGUMENT, "no-such-device");
}

/* Compiles add.onnx with weights in one combined file; returns the summary's
 * combined file name in `combined`. */
static void compile_add(char* combined) {
  char b1[1024], b2[1024], b3[1024];
  kiln_compile_options* o = NULL;
  kiln_summary* s = NULL;
  kiln_external_weight w;
  int64_t fixed[2] = {2, 3}, bad[1] = {-5};
  OK(kiln_compile_options_create(&o));
  OK(kiln_compile_options_set_external_weight(o, 2));
  OK(kiln_compile_options_set_external_weight_dir(o, path(b3, work_dir, "weights")));
  OK(kiln_compile_options_set_input_shape(o, "x", fixed, 2));
  OK(kiln_compile_options_set_target(o, "cpu"));
  OK(kiln_compile_options_set_model_name(o, "addmodel"));
  FAILS(kiln_compile_options_set_external_weight(o, 3), KILN_INVALID_ARGUMENT, "mode 3");
  FAILS(kiln_compile_options_set_input_shape(o, "x", bad, 1), KILN_INVALID_ARGUMENT, "-5");
  FAILS(kiln_compile_options_set_target(o, NULL), KILN_INVALID_ARGUMENT, "NULL");
  OK(kiln_compile(path(b1, model_dir, "add.onnx"), path(b2, work_dir, "add.kiln"), o, &s));
  CHECK(s != NULL);
  CHECK(kiln_summary_num_nodes(s) >= 1);
  CHECK(kiln_summary_embedded_weight_bytes(s) == 0);
  CHECK(kiln_summary_arena_bytes(s) < 1024);
  CHECK(strstr(kiln_summary_weight_dir(s), "weights") != NULL);
  CHECK(kiln_summary_external_weight_count(s) == 1);
  OK(kiln_summary_external_weight(s, 0, &w));
  CHECK(strcmp(w.path, "addmodel_weight_combined") == 0);
  CHECK(w.size == 24 && w.offset == 0 && strlen(w.id) == 64);
  strcpy(combined, w.path);
  FAILS(kiln_summary_external_weight(s, 1, &w), KILN_OUT_OF_RANGE, "external weight 1");
  kiln_summary_free(s);
  /* The same model one directory down: it records "../weights". */
  OK(kiln_compile(path(b1, model_dir, "add.onnx"), path(b2, work_dir, "sub/add.kiln"), o, NULL));
  /* A missing file: not found, named; summary left NULL. */
  s = (kiln_summary*)1;
  FAILS(kiln_compile(path(b1, model_dir, "missing.onnx"), path(b2, work_dir, "x.kiln"), o, &s), KILN_NOT_FOUND,
        "missing.onnx");
  CHECK(s == NULL);
  kiln_compile_options_free(o);
  kiln_compile_options_free(NULL);
}

static void run_model(kiln_model* m, float scale, int line) {
  float y[6] = {0};
  kiln_tensor x = {x_data, KILN_DTYPE_FLOAT32, kShape, 2, KILN_MEMORY_HOST};
  kiln_tensor out = {y, KILN_DTYPE_FLOAT32, kShape, 2, KILN_MEMORY_HOST};
  OK(kiln_model_bind_input(m, 0, &x));
  OK(kiln_model_bind_output(m, 0, &out));
  OK(kiln_model_execute(m));
  check_output(y, scale, line);
}

static void model_calls(const char* combined) {
  char b1[1024], b2[1024];
  kiln_load_config* c = NULL;
  kiln_model* m = NULL;
  kiln_tensor_info info;
  kiln_stream* stream = NULL;
  float y[6] = {0}, y2[6] = {0};
  int64_t dims[4] = {0};
  size_t rank = 0, size = 0, wsize = 0;
  void *image, *weights;
  kiln_tensor x = {x_data, KILN_DTYPE_FLOAT32, kShape, 2, KILN_MEMORY_HOST};
  kiln_tensor out = {y, KILN_DTYPE_FLOAT32, kShape, 2, KILN_MEMORY_HOST};
  kiln_tensor out2 = {y2, KILN_DTYPE_FLOAT32, kShape, 2, KILN_MEMORY_HOST};
  kiln_tensor wrong = {y, KILN_DTYPE_INT32, kShape, 2, KILN_MEMORY_HOST};

  OK(kiln_load_config_create(&c));
  OK(kiln_load_config_set_device(c, "cpu"));
  OK(kiln_load_config_set_threads(c, 2));
  FAILS(kiln_load_config_set_threads(c, 0), KILN_INVALID_ARGUMENT, "threads 0");
  OK(kiln_load_config_set_weight_dir(c, path(b1, work_dir, "weights")));
  OK(kiln_load_config_set_weight_load_mode(c, KILN_WEIGHTS_COPY));
  FAILS(kiln_load_config_set_weight_load_mode(c, (kiln_weight_load_mode)9), KILN_INVALID_ARGUMENT, "mode 9");
  OK(kiln_load_config_set_verify_weights(c, 1));
  OK(kiln_model_load(path(b2, work_dir, "add.kiln"), c, &m));

  CHECK(kiln_model_input_count(m) == 1);
  CHECK(kiln_model_output_count(m) == 1);
  OK(kiln_model_input_info(m, 0, &info));
  CHECK(strcmp(info.name, "x") == 0 && info.dtype == KILN_DTYPE_FLOAT32 && info.rank == 2 && info.bytes == 24);
  CHECK(info.dims[0].value == 2 && info.dims[0].min == 2 && info.dims[0].max == 2 && info.dims[0].symbol == NULL);
  CHECK(info.dims[1].value == 3);
  OK(kiln_model_output_info(m, 0, &info));
  CHECK(strcmp(info.name, "y") == 0 && info.rank == 2);
  FAILS(kiln_model_input_info(m, 1, &info), KILN_OUT_OF_RANGE, "input 1");
  FAILS(kiln_model_bind_input(m, 3, &x), KILN_OUT_OF_RANGE, "input 3");

  run_model(m, 1.0f, __LINE__);
  OK(kiln_model_output_shape(m, 0, dims, 4, &rank));
  CHECK(rank == 2 && dims[0] == 2 && dims[1] == 3);
  /* New buffers (address refresh), then a wrong dtype: refused, named. */
  OK(kiln_model_bind_output(m, 0, &out2));
  OK(kiln_model_execute(m));
  check_output(y2, 1.0f, __LINE__);
  OK(kiln_model_bind_output(m, 0, &wrong));
  FAILS(kiln_model_execute(m), KILN_INVALID_ARGUMENT, "output 0 'y': expected dtype float32");

  /* Asynchronous, on a stream. */
  OK(kiln_stream_create("cpu", &stream));
  memset(y, 0, sizeof y);
  OK(kiln_model_bind_output(m, 0, &out));
  OK(kiln_model_execute_async(m, stream));
  OK(kiln_stream_synchronize(stream));
  check_output(y, 1.0f, __LINE__);
  kiln_stream_free(stream);
  kiln_model_free(m);

  /* The weight directory the file records: "weights" next to it is used
   * as is; "../weights" only when trusted. */
  OK(kiln_model_load(path(b2, work_dir, "add.kiln"), NULL, &m));
  if (m) run_model(m, 1.0f, __LINE__);
  kiln_model_free(m);
  m = NULL;
  FAILS(kiln_model_load(path(b2, work_dir, "sub/add.kiln"), NULL, &m), KILN_INVALID_ARGUMENT,
        "outside the model's own directory");
  CHECK(m == NULL);
  kiln_load_config_free(c);
  OK(kiln_load_config_create(&c));
  OK(kiln_load_config_set_trust_recorded_weight_dir(c, 1));
  OK(kiln_model_load(path(b2, work_dir, "sub/add.kiln"), c, &m));
  if (m) run_model(m, 1.0f, __LINE__);
  kiln_model_free(m);

  /* From memory, weights from memory the caller filled. */
  image = read_all(path(b2, work_dir, "add.kiln"), &size);
  weights = read_all(path(b1, work_dir, "weights/addmodel_weight_combined"), &wsize);
  CHECK(image != NULL && weights != NULL);
  kiln_load_config_free(c);
  OK(kiln_load_config_create(&c));
  m = NULL;
  FAILS(kiln_model_load_from_memory(image, size, c, &m), KILN_INVALID_ARGUMENT, combined);
  CHECK(m == NULL);
  OK(kiln_load_config_set_external_weight_address(c, combined, weights, wsize));
  OK(kiln_model_load_from_memory(image, size, c, &m));
  memset(image, 0, size); /* the model holds its own copy */
  run_model(m, 1.0f, __LINE__);
  kiln_model_free(m);
  /* A damaged image: corrupt, no model. */
  FAILS(kiln_model_load_from_memory(weights, wsize, c, &m), KILN_CORRUPT, "model in memory");
  free(image);

  /* Missing file, NULL arguments. */
  FAILS(kiln_model_load(path(b2, work_dir, "nothing.kiln"), NULL, &m), KILN_NOT_FOUND, "nothing.kiln");
  FAILS(kiln_model_load(NULL, NULL, &m), KILN_INVALID_ARGUMENT, "path is NULL");
  FAILS(kiln_model_execute(NULL), KILN_INVALID_ARGUMENT, "model is NULL");
  kiln_model_free(NULL);
  kiln_load_config_free(c);
  free(weights);
}

static void session_calls(void) {
  char b1[1024], b2[1024];
  kiln_compile_options* o = NULL;
  kiln_load_config* c = NULL;
  kiln_session* s = NULL;
  kiln_model *m1 = NULL, *m2 = NULL;
  kiln_summary* sum = NULL;
  kiln_stream* stream = NULL;
  kiln_weight_stats ws;
  uint32_t id = 0;
  float y[6] = {0};
  kiln_tensor x = {x_data, KILN_DTYPE_FLOAT32, kShape, 2, KILN_MEMORY_HOST};
  kiln_tensor out = {y, KILN_DTYPE_FLOAT32, kShape, 2, KILN_MEMORY_HOST};

  OK(kiln_compile_options_create(&o));
  OK(kiln_compile_options_set_external_weight(o, 1));
  OK(kiln_compile_options_set_external_weight_dir(o, path(b1, work_dir, "session_weights")));
  OK(kiln_load_config_create(&c));
  OK(kiln_load_config_set_weight_dir(c, path(b1, work_dir, "weights")));
  OK(kiln_session_create(o, c, &s));

  /* Two loads of one model share its weight. */
  OK(kiln_session_load_model(s, path(b2, work_dir, "add.kiln"), NULL, &m1));
  OK(kiln_session_load_model(s, path(b2, work_dir, "add.kiln"), c, &m2));
  OK(kiln_session_weight_stats(s, &ws));
  CHECK(ws.weights_shared == 1);
  run_model(m2, 1.0f, __LINE__);

  /* A graph with the package's custom op, compiled in the session with
   * per-weight files. */
  OK(kiln_session_add_graph(s, path(b2, model_dir, "custom.onnx"), &id));
  OK(kiln_session_compile_graph(s, id));
  OK(kiln_session_graph_summary(s, id, &sum));
  CHECK(kiln_summary_external_weight_count(sum) == 1);
  CHECK(strstr(kiln_summary_weight_dir(sum), "session_weights") != NULL);
  kiln_summary_free(sum);
  OK(kiln_stream_create(NULL, &stream));
  OK(kiln_session_load_graph(s, id, stream));
  OK(kiln_session_execute_graph(s, id, &x, 1, &out, 1));
  check_output(y, 2.0f, __LINE__);
  memset(y, 0, sizeof y);
  OK(kiln_session_execute_graph_async(s, id, stream, &x, 1, &out, 1));
  OK(kiln_stream_synchronize(stream));
  check_output(y, 2.0f, __LINE__);
  FAILS(kiln_session_execute_graph(s, id, &x, 1, &out, 0), KILN_INVALID_ARGUMENT, "expected 1 outputs, got 0");
  OK(kiln_session_remove_graph(s, id));
  FAILS(kiln_session_execute_graph(s, id, &x, 1, &out, 1), KILN_NOT_FOUND, "graph");
  FAILS(kiln_session_add_graph(s, path(b2, model_dir, "missing.onnx"), &id), KILN_NOT_FOUND, "missing.onnx");
  kiln_stream_free(stream);

  /* Models outlive their session. */
  kiln_session_free(s);
  run_model(m1, 1.0f, __LINE__);
  kiln_model_free(m1);
  kiln_model_free(m2);
  kiln_load_config_free(c);
  kiln_compile_options_free(o);
}

/* The package's op compiled from an ONNX file and run as a .kiln. */
static void custom_op_file(void) {
  char b1[1024], b2[1024];
  kiln_model* m = NULL;
  OK(kiln_compile(path(b1, model_dir, "custom.onnx"), path(b2, work_dir, "custom.kiln"), NULL, NULL));
  OK(kiln_model_load(b2, NULL, &m));
  if (m) run_model(m, 2.0f, __LINE__);
  kiln_model_free(m);
}

/* A graph-API model whose weight has a file_id (make_file_id_model.cc):
 * resolved from a file, from caller memory, or missing (named). */
static void file_id_model(void) {
  char b1[1024], b2[1024];
  kiln_load_config* c = NULL;
  kiln_model* m = NULL;
  size_t size = 0;
  void* table = read_all(path(b2, model_dir, "w_table.bin"), &size);
  CHECK(table != NULL && size == 8 + 6 * sizeof(float));
  path(b1, model_dir, "file_id.kiln");
  OK(kiln_load_config_create(&c));
  /* No entry for "w-table": the load fails naming the id. */
  FAILS(kiln_model_load(b1, c, &m), KILN_INVALID_ARGUMENT, "w-table");
  CHECK(m == NULL);
  FAILS(kiln_load_config_set_weight_file(c, "w-table", NULL), KILN_INVALID_ARGUMENT, "NULL");
  FAILS(kiln_load_config_set_weight_file(c, "w-table", ""), KILN_INVALID_ARGUMENT, "empty path");
  FAILS(kiln_load_config_set_weight_file_address(c, "w-table", NULL, 4), KILN_INVALID_ARGUMENT, "NULL");
  /* From the file (bytes [8, 32) of it). */
  OK(kiln_load_config_set_weight_file(c, "w-table", b2));
  OK(kiln_model_load(b1, c, &m));
  if (m) run_model(m, 1.0f, __LINE__);
  kiln_model_free(m);
  m = NULL;
  /* From memory the caller filled: too small first (named sizes), then whole. */
  OK(kiln_load_config_set_weight_file_address(c, "w-table", table, 16));
  FAILS(kiln_model_load(b1, c, &m), KILN_INVALID_ARGUMENT, "32 bytes required, 16 provided");
  OK(kiln_load_config_set_weight_file_address(c, "w-table", table, size));
  OK(kiln_model_load(b1, c, &m));
  if (m) run_model(m, 1.0f, __LINE__);
  kiln_model_free(m);
  kiln_load_config_free(c);
  free(table);
}

/* A named dim (ONNX dim_param "batch") fixed at compile time keeps its
 * name: kiln_dim {2, 2, 2, "batch"}; the unnamed dim has no symbol. */
static void symbol_model(void) {
  char b1[1024], b2[1024];
  kiln_compile_options* o = NULL;
  kiln_model* m = NULL;
  kiln_tensor_info info;
  int64_t fixed[2] = {2, 3};
  OK(kiln_compile_options_create(&o));
  OK(kiln_compile_options_set_input_shape(o, "x", fixed, 2));
  OK(kiln_compile(path(b1, model_dir, "batch.onnx"), path(b2, work_dir, "batch.kiln"), o, NULL));
  kiln_compile_options_free(o);
  OK(kiln_model_load(path(b2, work_dir, "batch.kiln"), NULL, &m));
  if (!m) return;
  OK(kiln_model_input_info(m, 0, &info));
  CHECK(strcmp(info.name, "x") == 0 && info.rank == 2 && info.bytes == 24);
  CHECK(info.dims[0].value == 2 && info.dims[0].min == 2 && info.dims[0].max == 2);
  CHECK(info.dims[0].symbol != NULL && strcmp(info.dims[0].symbol, "batch") == 0);
  CHECK(info.dims[1].value == 3 && info.dims[1].min == 3 && info.dims[1].max == 3 && info.dims[1].symbol == NULL);
  run_model(m, 1.0f, __LINE__);
  kiln_model_free(m);
}

/* Symbolic dims: open.onnx (y = relu(x), x [batch, 3]) compiled with batch
 * left open runs at any batch; output shapes come from the bound inputs.
 * batch.onnx (x [batch, 3] + w [2, 3]) admits batch 2 only: compiled open,
 * the error says what was left symbolic. */
static void symbolic_model(void) {
  char b1[1024], b2[1024];
  kiln_model* m = NULL;
  kiln_tensor_info info;
  int64_t dims[4] = {0};
  size_t rank = 0;
  FAILS(kiln_compile(path(b1, model_dir, "batch.onnx"), path(b2, work_dir, "batch_open.kiln"), NULL, NULL),
        KILN_INVALID_ARGUMENT, "left symbolic");
  OK(kiln_compile(path(b1, model_dir, "open.onnx"), path(b2, work_dir, "open.kiln"), NULL, NULL));
  OK(kiln_model_load(path(b2, work_dir, "open.kiln"), NULL, &m));
  if (!m) return;
  OK(kiln_model_input_info(m, 0, &info));
  CHECK(info.rank == 2 && info.bytes == 0);
  CHECK(info.dims[0].value == -1 && info.dims[0].min == 1 && info.dims[0].max == -1);
  CHECK(info.dims[0].symbol != NULL && strcmp(info.dims[0].symbol, "batch") == 0);
  CHECK(info.dims[1].value == 3);
  FAILS(kiln_model_output_shape_for_inputs(m, 0, dims, 4, &rank), KILN_INVALID_ARGUMENT, "input 0 'x' is not bound");
  for (int64_t batch = 1; batch <= 4; batch += 3) {
    float xs[12], ys[12];
    int64_t shape[2] = {batch, 3};
    kiln_tensor x = {xs, KILN_DTYPE_FLOAT32, shape, 2, KILN_MEMORY_HOST};
    for (int i = 0; i < batch * 3; ++i) xs[i] = (float)(i % 2 ? i : -i);
    OK(kiln_model_bind_input(m, 0, &x));
    OK(kiln_model_output_shape_for_inputs(m, 0, dims, 4, &rank));
    CHECK(rank == 2 && dims[0] == batch && dims[1] == 3);
    kiln_tensor y = {ys, KILN_DTYPE_FLOAT32, dims, 2, KILN_MEMORY_HOST};
    OK(kiln_model_bind_output(m, 0, &y));
    OK(kiln_model_execute(m));
    for (int i = 0; i < batch * 3; ++i) CHECK(ys[i] == (i % 2 ? (float)i : 0.0f));
  }
  {
    float xs[3] = {0};
    int64_t shape[2] = {0, 3};
    kiln_tensor x = {xs, KILN_DTYPE_FLOAT32, shape, 2, KILN_MEMORY_HOST};
    OK(kiln_model_bind_input(m, 0, &x));
    FAILS(kiln_model_output_shape_for_inputs(m, 0, dims, 4, &rank), KILN_INVALID_ARGUMENT,
          "dim 0 (symbol 'batch') is 0, outside its range 1..");
  }
  kiln_model_free(m);
  m = NULL;

  /* A range and gears (the CLI's --input-shape grammar). */
  {
    kiln_compile_options* o = NULL;
    OK(kiln_compile_options_create(&o));
    FAILS(kiln_compile_options_set_input_spec(o, "x:8..2,3"), KILN_INVALID_ARGUMENT, "range '8..2' of 'x' is empty");
    OK(kiln_compile_options_set_input_spec(o, "x:1..5,3|2,3"));
    OK(kiln_compile(path(b1, model_dir, "open.onnx"), path(b2, work_dir, "open_range.kiln"), o, NULL));
    kiln_compile_options_free(o);
  }
  OK(kiln_model_load(path(b2, work_dir, "open_range.kiln"), NULL, &m));
  if (!m) return;
  OK(kiln_model_input_info(m, 0, &info));
  CHECK(info.dims[0].value == -1 && info.dims[0].min == 1 && info.dims[0].max == 5);
  {
    float xs[18] = {0};
    int64_t shape[2] = {6, 3};
    kiln_tensor x = {xs, KILN_DTYPE_FLOAT32, shape, 2, KILN_MEMORY_HOST};
    OK(kiln_model_bind_input(m, 0, &x));
    FAILS(kiln_model_output_shape_for_inputs(m, 0, dims, 4, &rank), KILN_INVALID_ARGUMENT,
          "dim 0 (symbol 'batch') is 6, outside its range 1..5");
    shape[0] = 5;
    OK(kiln_model_bind_input(m, 0, &x));
    OK(kiln_model_output_shape_for_inputs(m, 0, dims, 4, &rank));
    CHECK(rank == 2 && dims[0] == 5 && dims[1] == 3);
  }
  kiln_model_free(m);
}

/* reshape.onnx: y = reshape(x [2, 3], t) with t a model input: t is a shape
 * input, and the output's shape follows the values bound to it. */
static void shape_input_model(void) {
  char b1[1024], b2[1024];
  kiln_model* m = NULL;
  int flag = -1;
  int64_t dims[4] = {0};
  size_t rank = 0;
  kiln_load_config* cfg = NULL;
  OK(kiln_compile(path(b1, model_dir, "reshape.onnx"), path(b2, work_dir, "reshape.kiln"), NULL, NULL));
  OK(kiln_load_config_create(&cfg));
  FAILS(kiln_load_config_set_plan_cache(cfg, 0, 0), KILN_INVALID_ARGUMENT, "max_plans 0");
  OK(kiln_load_config_set_plan_cache(cfg, 1, 1u << 20)); /* one plan kept: the targets alternate */
  OK(kiln_model_load(path(b2, work_dir, "reshape.kiln"), cfg, &m));
  kiln_load_config_free(cfg);
  if (!m) return;
  OK(kiln_model_input_is_shape_input(m, 0, &flag));
  CHECK(flag == 0);
  OK(kiln_model_input_is_shape_input(m, 1, &flag));
  CHECK(flag == 1);
  FAILS(kiln_model_input_is_shape_input(m, 2, &flag), KILN_INVALID_ARGUMENT, "input index 2 out of range");
  {
    float xs[6] = {1, -2, 3, -4, 5, -6}, ys[6] = {0};
    int64_t xshape[2] = {2, 3}, tshape[1] = {2};
    int64_t targets[2][2] = {{3, 2}, {-1, 6}};
    for (int r = 0; r < 4; ++r) {
      int k = r % 2;
      kiln_tensor x = {xs, KILN_DTYPE_FLOAT32, xshape, 2, KILN_MEMORY_HOST};
      kiln_tensor t = {targets[k], KILN_DTYPE_INT64, tshape, 1, KILN_MEMORY_HOST};
      OK(kiln_model_bind_input(m, 0, &x));
      OK(kiln_model_bind_input(m, 1, &t));
      OK(kiln_model_output_shape_for_inputs(m, 0, dims, 4, &rank));
      CHECK(rank == 2 && dims[0] == (k ? 1 : 3) && dims[1] == (k ? 6 : 2));
      kiln_tensor y = {ys, KILN_DTYPE_FLOAT32, dims, 2, KILN_MEMORY_HOST};
      OK(kiln_model_bind_output(m, 0, &y));
      OK(kiln_model_execute(m));
      for (int i = 0; i < 6; ++i) CHECK(ys[i] == xs[i]);
    }
  }
  kiln_model_free(m);
}

/* if_rank.onnx: y = c ? x : x flattened. Output 0 may take 2 shapes; each
 * run reports its own rank. */
static void if_rank_model(void) {
  char b1[1024], b2[1024];
  kiln_model* m = NULL;
  size_t count = 99, rank = 0;
  int64_t dims[4] = {0};
  kiln_tensor_info info;
  OK(kiln_compile(path(b1, model_dir, "if_rank.onnx"), path(b2, work_dir, "if_rank.kiln"), NULL, NULL));
  OK(kiln_model_load(path(b2, work_dir, "if_rank.kiln"), NULL, &m));
  if (!m) return;
  OK(kiln_model_output_rank_alternatives(m, 0, &count));
  CHECK(count == 2);
  FAILS(kiln_model_output_rank_alternatives(m, 1, &count), KILN_INVALID_ARGUMENT, "output index 1 out of range");
  OK(kiln_model_output_info(m, 0, &info));
  CHECK(info.bytes == 6 * sizeof(float));
  {
    float xs[6] = {1, -2, 3, -4, 5, -6}, ys[6] = {0};
    int64_t xshape[2] = {2, 3};
    for (int r = 0; r < 2; ++r) {
      uint8_t c = (uint8_t)(r == 0);
      kiln_tensor x = {xs, KILN_DTYPE_FLOAT32, xshape, 2, KILN_MEMORY_HOST};
      kiln_tensor ct = {&c, KILN_DTYPE_BOOL, NULL, 0, KILN_MEMORY_HOST};
      kiln_tensor y = {ys, KILN_DTYPE_FLOAT32, dims, info.rank, KILN_MEMORY_HOST};
      for (size_t d = 0; d < info.rank; ++d) dims[d] = info.dims[d].max; /* the described (largest) shape */
      OK(kiln_model_bind_input(m, 0, &x));
      OK(kiln_model_bind_input(m, 1, &ct));
      OK(kiln_model_bind_output(m, 0, &y));
      OK(kiln_model_execute(m));
      OK(kiln_model_output_shape(m, 0, dims, 4, &rank));
      if (c) CHECK(rank == 2 && dims[0] == 2 && dims[1] == 3);
      else CHECK(rank == 1 && dims[0] == 6);
      for (int i = 0; i < 6; ++i) CHECK(ys[i] == xs[i]);
    }
  }
  kiln_model_free(m);
  {
    kiln_model* add = NULL;
    OK(kiln_model_load(path(b2, work_dir, "reshape.kiln"), NULL, &add));
    if (!add) return;
    OK(kiln_model_output_rank_alternatives(add, 0, &count));
    CHECK(count == 0);
    kiln_model_free(add);
  }
}

/* Outputs Kiln allocates (kiln_model_run), for a model whose output bound is
 * provisional: Range(0, int(max(x))) grows run to run; lengths by hand. */
static void run_allocating(void) {
  char b1[1024], b2[1024];
  kiln_model* m = NULL;
  kiln_tensor y;
  kiln_tensor_info info;
  float xs[100];
  const float limits[4] = {3.5f, 17.0f, 2.0f, 64.0f};
  const int64_t xshape[1] = {100};
  OK(kiln_compile(path(b1, model_dir, "range_max.onnx"), path(b2, work_dir, "range_max.kiln"), NULL, NULL));
  OK(kiln_model_load(path(b2, work_dir, "range_max.kiln"), NULL, &m));
  if (!m) return;
  OK(kiln_model_output_info(m, 0, &info));
  CHECK(info.rank == 1 && info.dims[0].max == -1); /* no bound before a run */
  FAILS(kiln_model_run_output(m, 0, &y), KILN_OUT_OF_RANGE, "no kiln_model_run has succeeded");
  for (int r = 0; r < 4; ++r) {
    kiln_tensor x = {xs, KILN_DTYPE_FLOAT32, xshape, 1, KILN_MEMORY_HOST};
    for (int i = 0; i < 100; ++i) xs[i] = -1.0f;
    xs[42] = limits[r];
    OK(kiln_model_bind_input(m, 0, &x));
    OK(kiln_model_run(m));
    OK(kiln_model_run_output(m, 0, &y));
    CHECK(y.dtype == KILN_DTYPE_INT64 && y.rank == 1 && y.shape[0] == (int64_t)limits[r]);
    for (int64_t i = 0; i < (int64_t)limits[r] && y.data; ++i) CHECK(((const int64_t*)y.data)[i] == i);
  }
  FAILS(kiln_model_run_output(m, 1, &y), KILN_OUT_OF_RANGE, "output 1 does not exist");
  FAILS(kiln_model_run(NULL), KILN_INVALID_ARGUMENT, "model");
  kiln_model_free(m);
}

int main(int argc, char** argv) {
  char combined[256] = {0};
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL_DIR WORK_DIR\n", argv[0]);
    return 2;
  }
  snprintf(model_dir, sizeof model_dir, "%s", argv[1]);
  snprintf(work_dir, sizeof work_dir, "%s", argv[2]);
  library_queries();
  compile_add(combined);
  model_calls(combined);
  session_calls();
  custom_op_file();
  file_id_model();
  symbol_model();
  symbolic_model();
  shape_input_model();
  if_rank_model();
  run_allocating();
  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("ALL-OK\n");
  return 0;
}
