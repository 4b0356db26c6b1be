// Bindings for the frequency switcher, NVML and the CUDA driver
// (cpp/switcher.hpp, cpp/clock_locks.hpp, cpp/nvml_device.hpp,
// cpp/cuda_module.hpp). Python's facade is python/perseus/switcher.py.
//
// Only glue lives here: turning Python values into C++ ones (the rules they
// must meet are the core's), waiting so that Ctrl-C still reaches Python,
// numpy arrays, exception types, and scheduling a call on the main thread.
#include "pybind11.hpp"

#include <climits>
#include <memory>
#include <optional>
#include <string>

#include "clock_locks.hpp"
#include "clockd_client.hpp"
#include "cuda_loader.hpp"
#include "cuda_module.hpp"
#include "nvml_device.hpp"
#include "nvml_loader.hpp"
#include "switcher.hpp"

using perseus::ClockLocks;
using perseus::FrequencySwitcher;
using perseus::NvmlDevice;
using perseus::SwitcherOptions;
using perseus::SwitchLog;
using perseus::SwitchSource;
namespace nvml = perseus::nvml;
namespace cuda = perseus::cuda;

namespace {

PYBIND11_CONSTINIT py::gil_safe_call_once_and_store<py::object> nvml_error_type;
PYBIND11_CONSTINIT py::gil_safe_call_once_and_store<py::object> cuda_error_type;
PYBIND11_CONSTINIT py::gil_safe_call_once_and_store<py::object> library_error_type;

// Raises `type(message)` with extra attributes set on the instance.
void raise_with(const py::object& type, const char* message, const py::dict& attributes) {
  py::object instance = type(message);
  for (auto item : attributes) py::setattr(instance, item.first, item.second);
  PyErr_SetObject(type.ptr(), instance.ptr());
}

// ---- Python values to C++ ---------------------------------------------------

// An integer argument: an int or anything with __index__ (numpy integers),
// never a bool or a float (True would be 1 MHz; 1500.7 would be truncated).
// An int beyond long long keeps its sign (+-LLONG_MAX) and its text, which
// the core's range checks reject, printing the number the caller wrote.
struct Integer {
  long long value = 0;
  std::string text;  // set only when the value did not fit
  const char* shown() const { return text.empty() ? nullptr : text.c_str(); }
};

Integer integer(const py::handle& value, const char* argument) {
  PyObject* p = value.ptr();
  const std::string type = Py_TYPE(p)->tp_name;
  if (PyBool_Check(p) || type == "numpy.bool" || type == "numpy.bool_")
    throw py::type_error(std::string(argument) + " must be an integer, not bool");
  if (PyIndex_Check(p) == 0)
    throw py::type_error(std::string(argument) + " must be an integer, not " + type + " (" +
                         py::repr(value).cast<std::string>() + ")");
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(p));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred() != nullptr) throw py::error_already_set();
  if (overflow != 0) return {overflow > 0 ? LLONG_MAX : -LLONG_MAX, py::str(index)};
  return {v, {}};
}

unsigned clock_mhz(const py::handle& value, const char* argument) {
  const Integer i = integer(value, argument);
  return perseus::check_clock_mhz(i.value, argument, i.shown());
}

int device_index(const py::handle& value, const char* argument) {
  const Integer i = integer(value, argument);
  return perseus::check_device(i.value, argument, i.shown());
}

std::uintptr_t stream_handle(const py::handle& value) {
  const Integer i = integer(value, "stream");
  return perseus::check_stream(i.value, "stream", i.shown());
}

// Nanoseconds, -1 for None (forever).
std::int64_t timeout_ns(const py::handle& value, const char* argument) {
  if (value.is_none()) return -1;
  if (PyBool_Check(value.ptr()) || (PyFloat_Check(value.ptr()) == 0 && PyIndex_Check(value.ptr()) == 0))
    throw py::type_error(std::string(argument) + " must be a number of seconds or None, not " +
                         Py_TYPE(value.ptr())->tp_name);
  const double s = PyFloat_AsDouble(value.ptr());
  if (s == -1.0 && PyErr_Occurred() != nullptr) throw py::error_already_set();
  return perseus::check_timeout_s(s, argument);
}

// Seconds for a read-back period (a float or an int, not a bool); the rule is the core's.
double period_s(const py::handle& value, const char* argument) {
  if (PyBool_Check(value.ptr()) || (PyFloat_Check(value.ptr()) == 0 && PyIndex_Check(value.ptr()) == 0))
    throw py::type_error(std::string(argument) + " must be a number of seconds, not " +
                         Py_TYPE(value.ptr())->tp_name);
  const double s = PyFloat_AsDouble(value.ptr());
  if (s == -1.0 && PyErr_Occurred() != nullptr) throw py::error_already_set();
  perseus::check_period_s(s, argument);
  return s;
}

SwitcherOptions switcher_options(const py::handle& device, const py::handle& memory_mhz,
                                 const py::handle& record_capacity, const py::handle& verify_delay_s,
                                 const py::handle& verify_interval_s) {
  SwitcherOptions o;
  o.verify_delay_s = period_s(verify_delay_s, "verify_delay_s");
  o.verify_interval_s = period_s(verify_interval_s, "verify_interval_s");
  o.device = device_index(device, "device");
  o.memory_mhz = memory_mhz.is_none() ? 0 : clock_mhz(memory_mhz, "memory_mhz");
  const Integer capacity = integer(record_capacity, "record_capacity");
  o.record_capacity =
      perseus::check_record_capacity(capacity.value, "record_capacity", capacity.shown());
  return o;
}

py::array_t<std::uint32_t> as_array(const std::vector<unsigned>& v) {
  return to_numpy(std::vector<std::uint32_t>(v.begin(), v.end()));
}

// ---- Waiting, records, the main thread --------------------------------------

// Waits in slices so that Ctrl-C and other signals still reach Python.
template <typename Wait>
bool wait_interruptibly(std::int64_t timeout_ns, Wait wait) {
  constexpr std::int64_t kSliceNs = 50'000'000;
  std::int64_t left = timeout_ns;
  for (;;) {
    const std::int64_t step = timeout_ns < 0 ? kSliceNs : std::min(kSliceNs, left);
    bool done = false;
    {
      py::gil_scoped_release release;
      done = wait(step);
    }
    if (done) return true;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (timeout_ns >= 0) {
      left -= step;
      if (left <= 0) return false;
    }
  }
}

py::dict log_columns(const FrequencySwitcher& s) {
  SwitchLog log;
  {
    py::gil_scoped_release release;
    log = s.records();
  }
  py::dict out;
  out["time_ns"] = to_numpy(std::move(log.time_ns));
  out["requested_ns"] = to_numpy(std::move(log.requested_ns));
  out["latency_ns"] = to_numpy(std::move(log.latency_ns));
  out["requested_mhz"] = to_numpy(std::move(log.requested_mhz));
  out["applied_mhz"] = to_numpy(std::move(log.applied_mhz));
  out["status"] = to_numpy(std::move(log.status));
  out["source"] = to_numpy(std::move(log.source));
  out["dropped"] = log.dropped;
  return out;
}

// Runs a Python callable queued by call_on_main_thread (main thread, GIL held).
int run_on_main_thread(void* callable) {
  PyObject* fn = static_cast<PyObject*>(callable);
  PyObject* result = PyObject_CallNoArgs(fn);
  if (result == nullptr) PyErr_WriteUnraisable(fn);  // never raise into whatever main was doing
  Py_XDECREF(result);
  Py_DECREF(fn);
  return 0;
}

// ---- What Python sees, by concept ------------------------------------------

// NvmlError, CudaError, LibraryLoadError and the translator raising them.
void register_errors(py::module_& m) {
  nvml_error_type.call_once_and_store_result([&]() {
    py::object t = py::exception<nvml::Error>(m, "NvmlError", PyExc_RuntimeError);
    t.attr("__doc__") =
        "An NVML call failed. ``code`` is NVML's return code (an int; compare with "
        "NvmlReturn), ``function`` the NVML function; the message carries NVML's description "
        "and a hint.";
    return t;
  });
  cuda_error_type.call_once_and_store_result([&]() {
    py::object t = py::exception<cuda::Error>(m, "CudaError", PyExc_RuntimeError);
    t.attr("__doc__") = "A CUDA driver call failed; ``code`` is the CUresult.";
    return t;
  });
  library_error_type.call_once_and_store_result([&]() {
    py::object t = py::exception<perseus::LibraryError>(m, "LibraryLoadError", PyExc_OSError);
    t.attr("__doc__") =
        "The NVML or CUDA driver library could not be loaded; the message names the library "
        "and the environment variable (PERSEUS_NVML_LIBRARY, PERSEUS_CUDA_LIBRARY) that "
        "overrides it.";
    return t;
  });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const nvml::Error& e) {
      raise_with(nvml_error_type.get_stored(), e.what(),
                 py::dict("code"_a = e.code(), "function"_a = e.function()));
    } catch (const cuda::Error& e) {
      raise_with(cuda_error_type.get_stored(), e.what(), py::dict("code"_a = e.code()));
    } catch (const perseus::LibraryError& e) {
      raise_with(library_error_type.get_stored(), e.what(), py::dict());
    }
  });
}

// NvmlReturn and SwitchSource.
void register_enums(py::module_& m) {
  py::enum_<nvml::ReturnCode> nvml_return(m, "NvmlReturn", py::arithmetic(),
                                          "NVML return codes (nvmlReturn_t) that perseus names.");
  for (const auto& [code, name] : nvml::kReturnCodeNames) nvml_return.value(name, code);

  py::enum_<SwitchSource> source(m, "SwitchSource", py::arithmetic(),
                                 "Why the switcher made a clock change.");
  for (const auto& [value, name] : perseus::kSwitchSourceNames) source.value(name, value);
}

// The native switcher behind perseus.FrequencySwitcher.
void register_frequency_switcher(py::module_& m) {
  // Held by perseus::make_shared_switcher's shared_ptr (it leaks a switcher
  // whose close() gave up on a hung NVML call).
  py::class_<FrequencySwitcher, std::shared_ptr<FrequencySwitcher>>(
      m, "Switcher", "Native frequency switcher of one GPU (use perseus.FrequencySwitcher instead).")
      .def(py::init([](const py::object& device, const py::object& memory_mhz,
                       const py::object& record_capacity, const py::object& verify_delay_s,
                       const py::object& verify_interval_s) {
             const SwitcherOptions o = switcher_options(device, memory_mhz, record_capacity,
                                                        verify_delay_s, verify_interval_s);
             py::gil_scoped_release release;
             return perseus::make_shared_switcher(o);
           }),
           "device"_a = 0, "memory_mhz"_a = py::none(), "record_capacity"_a = 1 << 16,
           "verify_delay_s"_a = SwitcherOptions{}.verify_delay_s,
           "verify_interval_s"_a = SwitcherOptions{}.verify_interval_s)
      .def(
          "set",
          [](FrequencySwitcher& s, const py::object& mhz) { return s.set(clock_mhz(mhz, "mhz")); },
          "mhz"_a, "Request an SM clock; returns the supported clock that will be applied.")
      .def(
          "set_on_stream",
          [](FrequencySwitcher& s, const py::object& stream, const py::object& mhz) {
            const std::uintptr_t handle = stream_handle(stream);
            const unsigned target = clock_mhz(mhz, "mhz");
            py::gil_scoped_release release;  // the launch may wait for room in the stream
            return s.set_on_stream(handle, target);
          },
          "stream"_a, "mhz"_a, "Request an SM clock when the GPU reaches this point of a stream.")
      .def("reset", &FrequencySwitcher::reset, "Request the driver's default clocks.")
      .def(
          "wait_idle",
          [](FrequencySwitcher& s, const py::object& timeout_s) {
            return wait_interruptibly(timeout_ns(timeout_s, "timeout_s"),
                                      [&s](std::int64_t ns) { return s.wait_idle(ns); });
          },
          "timeout_s"_a = py::none(), "Wait until the latest target is applied; False on timeout.")
      .def("close", &FrequencySwitcher::close, py::call_guard<py::gil_scoped_release>(),
           "Reset what was locked, stop the worker.")
      .def(
          "snap",
          [](const FrequencySwitcher& s, const py::object& mhz) {
            return s.snap(clock_mhz(mhz, "mhz"));
          },
          "mhz"_a, "The supported clock that set(mhz) would apply.")
      .def_property_readonly("supported_mhz",
                             [](const FrequencySwitcher& s) { return as_array(s.supported_mhz()); })
      .def_property_readonly("memory_mhz", &FrequencySwitcher::memory_mhz)
      .def_property_readonly("applied_mhz", &FrequencySwitcher::applied_mhz)
      .def_property_readonly("target_mhz", &FrequencySwitcher::target_mhz)
      .def_property_readonly("device", [](const FrequencySwitcher& s) { return s.device().cuda_index; })
      .def_property_readonly("nvml_index",
                             [](const FrequencySwitcher& s) { return s.device().nvml_index; })
      .def_property_readonly("name", [](const FrequencySwitcher& s) { return s.device().name; })
      .def_property_readonly("closed", &FrequencySwitcher::closed)
      .def_property_readonly("failed", &FrequencySwitcher::failed)
      .def_property_readonly("hung", &FrequencySwitcher::hung)
      .def(
          "mismatches",
          [](const FrequencySwitcher& s) {
            py::dict out;
            out["overridden"] = s.mismatches(SwitchSource::kOverridden);
            out["clamped"] = s.mismatches(SwitchSource::kClamped);
            out["changed"] = s.mismatches(SwitchSource::kChanged);
            return out;
          },
          "Read-backs of the SM clock that disagreed, by cause.")
      .def_property_readonly("pending_stream_callbacks", &FrequencySwitcher::pending_stream_callbacks)
      .def("records", &log_columns, "The applied-change log, as columns (numpy arrays).");
}

// Direct NVML access: NvmlDevice and the driver-wide queries.
void register_nvml_device(py::module_& m) {
  py::class_<NvmlDevice>(m, "NvmlDevice",
                         "Direct NVML access to one GPU (CUDA numbering); calls run on the "
                         "caller's thread and bypass the switchers' lock counts.")
      .def(py::init([](const py::object& index) {
             const int device = device_index(index, "index");
             py::gil_scoped_release release;
             return NvmlDevice(device);
           }),
           "index"_a = 0)
      .def_static("from_uuid", &NvmlDevice::by_uuid, "uuid"_a, py::call_guard<py::gil_scoped_release>(),
                  "The GPU with this UUID, whatever CUDA_VISIBLE_DEVICES says (index is -1).")
      .def_property_readonly("index", [](const NvmlDevice& d) { return d.info().cuda_index; })
      .def_property_readonly("nvml_index", [](const NvmlDevice& d) { return d.info().nvml_index; })
      .def_property_readonly("name", [](const NvmlDevice& d) { return d.info().name; })
      .def_property_readonly("uuid", [](const NvmlDevice& d) { return d.info().uuid; })
      .def(
          "supported_memory_clocks",
          [](const NvmlDevice& d) { return as_array(d.supported_memory_clocks()); },
          "Supported memory clocks in MHz, ascending (empty if not reported).")
      .def(
          "supported_graphics_clocks",
          [](const NvmlDevice& d, const py::object& memory_mhz) {
            std::optional<unsigned> mhz;
            if (!memory_mhz.is_none()) mhz = clock_mhz(memory_mhz, "memory_mhz");
            return as_array(d.supported_graphics_clocks(mhz));
          },
          "memory_mhz"_a = py::none(),
          "Supported SM clocks in MHz, ascending, at a memory clock (default: the highest).")
      .def(
          "clock_mhz",
          [](const NvmlDevice& d, const std::string& kind) {
            return d.clock_mhz(perseus::parse_clock_type(kind));
          },
          "kind"_a = "sm", "The current clock ('sm', 'graphics' or 'memory') in MHz.")
      .def("total_energy_mj", &NvmlDevice::total_energy_mj,
           "Energy used since the driver loaded, in millijoules.")
      .def(
          "set_locked_clocks",
          [](const NvmlDevice& d, const py::object& min_mhz, const py::object& max_mhz) {
            const unsigned lo = clock_mhz(min_mhz, "min_mhz"), hi = clock_mhz(max_mhz, "max_mhz");
            py::gil_scoped_release release;
            d.set_locked_clocks(lo, hi);
          },
          "min_mhz"_a, "max_mhz"_a, "Lock the SM clock into [min_mhz, max_mhz].")
      .def("reset_locked_clocks", &NvmlDevice::reset_locked_clocks,
           py::call_guard<py::gil_scoped_release>(), "Give the SM clock back to the driver.")
      .def(
          "set_memory_locked_clocks",
          [](const NvmlDevice& d, const py::object& min_mhz, const py::object& max_mhz) {
            const unsigned lo = clock_mhz(min_mhz, "min_mhz"), hi = clock_mhz(max_mhz, "max_mhz");
            py::gil_scoped_release release;
            d.set_memory_locked_clocks(lo, hi);
          },
          "min_mhz"_a, "max_mhz"_a, "Lock the memory clock into [min_mhz, max_mhz].")
      .def("reset_memory_locked_clocks", &NvmlDevice::reset_memory_locked_clocks,
           py::call_guard<py::gil_scoped_release>(), "Give the memory clock back to the driver.");

  m.def("nvml_device_count", &perseus::nvml_device_count, py::call_guard<py::gil_scoped_release>(),
        "GPUs visible to CUDA (honours CUDA_VISIBLE_DEVICES), counted through NVML.");
  m.def("nvml_driver_version", &perseus::nvml_driver_version, py::call_guard<py::gil_scoped_release>(),
        "The NVIDIA driver version string.");
  m.def(
      "nvml_error_hint", [](int code) { return std::string(nvml::hint(code)); }, "code"_a,
      "What usually fixes an NVML error code ('' if nothing to add).");
}

// The process's clock locks: the watchdog's feed and the clock service's socket.
void register_clock_locks(py::module_& m) {
  m.def(
      "set_clock_watchdog", [](int fd) { ClockLocks::instance().set_watchdog(fd); }, "fd"_a,
      "Hand the core the clock watchdog's socket (it owns the descriptor from now on) and send "
      "it the GPUs locked now.");
  m.def(
      "clock_watchdog_connected", [] { return ClockLocks::instance().has_watchdog(); },
      "Whether the core still has a live socket to a clock watchdog.");
  m.def(
      "clockd_socket", [] { return perseus::clockd::socket_path(); },
      "The `perseus clockd` socket switchers use for their clock locks ('' for NVML directly).");
  m.def(
      "clock_watchdog_behind", [] { return ClockLocks::instance().watchdog_behind(); },
      "Whether the latest set of locked GPUs has yet to reach the watchdog's socket (it is not "
      "reading); sends nothing itself.");
  m.def(
      "clock_watchdog_stalls", [] { return ClockLocks::instance().watchdog_stalls(); },
      "How many sends to the clock watchdog found its socket full.");
  m.def(
      "locked_clocks", [] { return ClockLocks::instance().state_line(); },
      "What the clock watchdog was last told: 'sm=<uuid> memory=<uuid> ...' ('' if nothing).");
}

// The CUDA driver pieces the profiler's blocking-power kernel needs.
void register_cuda(py::module_& m) {
  py::class_<cuda::Module>(m, "CudaModule",
                           "A PTX module in the calling thread's current CUDA context.")
      .def(py::init([](const py::bytes& image) { return std::make_unique<cuda::Module>(image); }),
           "image"_a)
      .def(
          "launch",
          [](const cuda::Module& module, const std::string& kernel, unsigned grid, unsigned block,
             const py::object& stream, const std::vector<std::uint64_t>& arguments) {
            module.launch(kernel, grid, block, stream_handle(stream), arguments);
          },
          "kernel"_a, py::kw_only(), "grid"_a, "block"_a, "stream"_a, "arguments"_a,
          "Launch a kernel whose parameters are all 64-bit integers.")
      .def("close", &cuda::Module::close, "Unload the module (idempotent).");

  py::class_<cuda::MappedHostMemory>(m, "MappedHostMemory",
                                     "Zeroed page-locked host memory that the GPU can read and write.")
      .def(py::init<std::size_t>(), "size_bytes"_a)
      .def_property_readonly("host_address", &cuda::MappedHostMemory::host_address)
      .def_property_readonly("device_address", &cuda::MappedHostMemory::device_address)
      .def_property_readonly("size_bytes", &cuda::MappedHostMemory::size_bytes)
      .def("close", &cuda::MappedHostMemory::close, "Free the memory (idempotent).");
}

// Running a Python callable on the main thread (signal-safe hand-off).
void register_main_thread(py::module_& m) {
  m.def(
      "call_on_main_thread",
      [](const py::function& fn) {
        PyObject* p = fn.inc_ref().ptr();
        if (Py_AddPendingCall(&run_on_main_thread, p) == 0) return true;
        Py_DECREF(p);  // the queue is full
        return false;
      },
      "fn"_a,
      "Queue fn() to run on the main thread between two of its Python instructions; False if "
      "the queue is full. Exceptions in fn are reported as unraisable.");
}

}  // namespace

void register_switcher(py::module_& m) {
  register_errors(m);
  register_enums(m);
  register_frequency_switcher(m);
  register_nvml_device(m);
  register_clock_locks(m);
  register_cuda(m);
  register_main_thread(m);
}
