/* Runs a compiled .kiln model through Kiln's C API: describes its inputs
 * and outputs, fills every input with a constant, runs it and prints the
 * first values of each output. Build against an installed Kiln:
 *
 *   cc run_model.c $(pkg-config --cflags --libs kiln) -o run_model
 *   ./run_model model.kiln [VALUE]
 *
 * or with CMake: find_package(Kiln) and link Kiln::runtime
 * (examples/c_api/CMakeLists.txt).
 */
#include <stdio.h>
#include <stdlib.h>

#include "kiln/kiln_c.h"

static int fail(const char* what) {
  fprintf(stderr, "run_model: %s: %s\n", what, kiln_last_error_message());
  return 1;
}

int main(int argc, char** argv) {
  kiln_model* model = NULL;
  kiln_load_config* config = NULL;
  size_t i, j, n_in, n_out;
  void** buffers;
  int64_t** shapes;
  double value = argc > 2 ? atof(argv[2]) : 1.0;
  int rc = 0;
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.kiln [VALUE]\n", argv[0]);
    return 2;
  }
  if (kiln_load_config_create(&config) != KILN_OK || kiln_load_config_set_threads(config, 1) != KILN_OK) {
    return fail("configuration");
  }
  if (kiln_model_load(argv[1], config, &model) != KILN_OK) return fail("load");
  n_in = kiln_model_input_count(model);
  n_out = kiln_model_output_count(model);
  buffers = calloc(n_in + n_out, sizeof *buffers);
  shapes = calloc(n_in + n_out, sizeof *shapes);
  for (i = 0; i < n_in + n_out && rc == 0; ++i) {
    kiln_tensor_info info;
    kiln_tensor t;
    const int is_input = i < n_in;
    const size_t index = is_input ? i : i - n_in;
    if ((is_input ? kiln_model_input_info(model, index, &info) : kiln_model_output_info(model, index, &info)) !=
        KILN_OK) {
      rc = fail("describe");
      break;
    }
    printf("%s %zu '%s': %s[", is_input ? "input" : "output", index, info.name, kiln_dtype_name(info.dtype));
    shapes[i] = calloc(info.rank + 1, sizeof(int64_t));
    for (j = 0; j < info.rank; ++j) {
      shapes[i][j] = info.dims[j].value >= 0 ? info.dims[j].value : info.dims[j].max;
      printf("%s%lld", j ? "," : "", (long long)shapes[i][j]);
    }
    printf("] %zu bytes\n", info.bytes);
    buffers[i] = calloc(info.bytes ? info.bytes : 1, 1);
    if (is_input && info.dtype == KILN_DTYPE_FLOAT32) {
      for (j = 0; j < info.bytes / sizeof(float); ++j) ((float*)buffers[i])[j] = (float)value;
    }
    t.data = buffers[i];
    t.dtype = info.dtype;
    t.shape = shapes[i];
    t.rank = info.rank;
    t.memory = KILN_MEMORY_HOST;
    if ((is_input ? kiln_model_bind_input(model, index, &t) : kiln_model_bind_output(model, index, &t)) != KILN_OK) {
      rc = fail("bind");
    }
  }
  if (rc == 0 && kiln_model_execute(model) != KILN_OK) rc = fail("execute");
  for (i = 0; rc == 0 && i < n_out; ++i) {
    kiln_tensor_info info;
    kiln_model_output_info(model, i, &info);
    printf("output %zu first values:", i);
    for (j = 0; info.dtype == KILN_DTYPE_FLOAT32 && j < 5 && j < info.bytes / sizeof(float); ++j) {
      printf(" %g", ((float*)buffers[n_in + i])[j]);
    }
    printf("\n");
  }
  for (i = 0; i < n_in + n_out; ++i) {
    free(buffers[i]);
    free(shapes[i]);
  }
  free(buffers);
  free(shapes);
  kiln_model_free(model);
  kiln_load_config_free(config);
  return rc;
}
