// The Python module mymetaops._C. It exposes nothing itself: importing it loads the library,
// whose static initializers register the ops with the PyTorch dispatcher.
#include <Python.h>

extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", "mymetaops operators", -1, nullptr};
  return PyModule_Create(&module);
}
