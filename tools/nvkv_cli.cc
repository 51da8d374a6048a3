// nvkv-cli: the command-line tool for nvkv stores. This file holds the command table, the help
// texts, the command-line parser and main; the commands are in tools/cli/. It uses only the
// public API (nvkv/*.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/cli/cli.h"

#ifndef NVKV_VERSION_STRING
#define NVKV_VERSION_STRING "unknown"
#endif

namespace nvkv::cli {
namespace {

struct OptionSpec {
  const char* name;        // "--limit"
  const char* value_name;  // "N", or nullptr for a flag
  const char* help;
};

struct CommandSpec {
  const char* name;
  const char* operands;  // for the usage line
  size_t min_operands;
  size_t max_operands;
  const char* summary;      // one line, for the command list
  const char* description;  // paragraphs, for `nvkv-cli COMMAND --help`
  std::vector<OptionSpec> options;
  Outcome (*run)(const Context&);
};

const std::vector<OptionSpec>& GlobalOptions() {
  static const std::vector<OptionSpec> options = {
      {"--db", "PATH", "the store (default: $NVKV_DB, else ./nvkv.db)"},
      {"--ordered", nullptr,
       "the ordered index (also NVKV_ORDERED=1): format records it, an open uses it"},
      {"--hash", nullptr, "the hash index: open a store formatted --ordered without key order"},
      {"--hex", nullptr, "keys and values are given and printed in hex"},
      {"--key-hex", nullptr, "keys only are given and printed in hex"},
      {"--value-hex", nullptr, "values only are given and printed in hex"},
      {"--backend", "B", "auto (default), nvme, direct or sync"},
      {"--shards", "N",
       "shards to open the store with (default 4; a zoned namespace with few open or active "
       "zones takes fewer)"},
      {"--degraded", nullptr,
       "open even when pages of the log cannot be read, without their records (a plain open "
       "fails, naming them); for get, dump, check and the other commands"},
      {"--help", nullptr, "help for the tool, or for the command it follows"},
      {"--version", nullptr, "print the version"},
  };
  return options;
}

const std::vector<CommandSpec>& Commands() {
  static const std::vector<CommandSpec> commands = {
      {"format", "", 0, 0, "create a store (never over data without --force)",
       "Formats a new store at the --db path. A missing file is created with --capacity bytes\n"
       "(the whole file is written once). A block device or NVMe namespace is used whole.\n"
       "Refuses a path that holds a store, or data that is not one, unless --force is given:\n"
       "then a store file is deleted and created afresh (same size unless --capacity), and a\n"
       "block device is overwritten. Pages and segments are fixed at format; so is the index\n"
       "mode every later command opens with (hash, or --ordered), unless it asks for the\n"
       "other (--ordered, --hash).",
       {{"--capacity", "SIZE", "size of a new store file (default 1g)"},
        {"--page-bytes", "SIZE", "page size: a power of two from 4k to 64k (default 4k)"},
        {"--segment-bytes", "SIZE",
         "segment size: a page multiple, 16 pages to 8m (default 1m; below 64m, 1/64th)"},
        {"--force", nullptr, "destroy what the path holds"}},
       RunFormat},
      {"put", "KEY VALUE", 2, 2, "set KEY to VALUE ('-': read VALUE from stdin)",
       "Sets KEY to VALUE, durably. VALUE '-' reads the value from stdin, all of it, any bytes\n"
       "(with --hex or --value-hex, stdin holds hex digits; white space between them is\n"
       "ignored). The store\n"
       "must exist (see format). A key that starts with '-' goes after '--'.",
       {},
       RunPut},
      {"get", "KEY", 1, 1, "print KEY's value",
       "Prints KEY's value to stdout as it is stored, raw bytes with no newline added (with\n"
       "--hex or --value-hex: in hex, and a newline). Exit status 1 when KEY is not in the\n"
       "store. With --json, one JSON object: {\"key\": ..., \"value\": ...} as strings when they\n"
       "are UTF-8 text, else (or with their --hex flag) \"key_hex\" and \"value_hex\" in hex: no\n"
       "byte is lost.",
       {{"--json", nullptr, "one JSON object: the key and its value"}},
       RunGet},
      {"del", "KEY", 1, 1, "delete KEY",
       "Deletes KEY, durably. A KEY not in the store is not there afterwards either: exit 0.",
       {},
       RunDel},
      {"scan", "", 0, 0, "print pairs in key order (--from, --to, --limit; ordered index)",
       "Prints the pairs with FROM <= key < TO in byte order of the keys, one per line in the\n"
       "dump format (without its header line). Needs the ordered index: a store formatted\n"
       "with --ordered opens with it; give --ordered to open a hash store with it.",
       {{"--from", "KEY", "first key (default: the first)"},
        {"--to", "KEY", "stop before this key (default: no end)"},
        {"--limit", "N", "print at most N pairs"},
        {"--keys-only", nullptr, "print only the keys"}},
       RunScan},
      {"load", "FILE|-", 1, 1, "write the pairs of a dump (FILE, or '-' for stdin)",
       "Writes every pair of FILE (or stdin for '-'), which is in the dump format, in batches,\n"
       "and makes them durable at the end. A later line for the same key wins. Stops at the\n"
       "first malformed line, naming it (exit status 3); the lines before it are written.\n"
       "The store must exist (see format).",
       {},
       RunLoad},
      {"dump", "", 0, 0, "print every pair, in the dump format",
       "Prints every live pair in the dump format (below), which load reads back: with the\n"
       "hash index in the order of the log, with the ordered index in key order.",
       {},
       RunDump},
      {"stats", "", 0, 0, "print counters and space",
       "Prints keys, index memory, space and segments, the recovery this open made, and the\n"
       "operation counters (which count since the command opened the store).",
       {{"--json", nullptr, "one JSON object instead of the table"}},
       RunStats},
      {"check", "", 0, 0, "read every page; verify checksums, records and index",
       "Reads every page of the store: verifies both superblocks and every page's checksum,\n"
       "decodes every segment's log, reads every live key back and compares it with its\n"
       "record, and checks that every index entry leads to a live record. Prints what it read\n"
       "and one line per problem, saying where (segment, page, LBA). A log that ends at a\n"
       "damaged page is the last write cut short by a crash (a torn tail): counted, not a\n"
       "problem. A damaged page with more of its log after it is a problem: recovery stops\n"
       "there, so the records after it are lost. Exit status 4 when problems are found.",
       {{"--json", nullptr, "one JSON object: the counts, \"ok\", \"problems\" and \"notes\""}},
       RunCheck},
      {"compact", "", 0, 0, "clean every segment holding dead records",
       "Copies the live records out of every segment that holds dead ones and frees those\n"
       "segments, now (background compaction does this as space runs low).",
       {},
       RunCompact},
      {"info", "", 0, 0, "print device, layout, use and io_uring features",
       "Prints the backend in use, the device's block size and capacity (and zones, on a\n"
       "zoned namespace), the store's layout and use, its limits, the io_uring features in\n"
       "force and the notes Open left (fallbacks it took). On a zoned namespace, where no\n"
       "store opens yet, prints the device and its zones (model and states) and why, and\n"
       "exits with the open's error.",
       {{"--json", nullptr, "one JSON object instead of the table"}},
       RunInfo},
      {"resize", "", 0, 0, "grow a store, keeping its data",
       "Gives the store more room, keeping every key: a store file is first extended to\n"
       "--capacity bytes (the new part written with zeros), and the store then takes every\n"
       "segment its file or device holds beyond its own (a file extended by other means, a\n"
       "block device or namespace made larger). A store never shrinks. Safe against a crash\n"
       "at any point: the store opens afterwards at its old size or its new one, whole.",
       {{"--capacity", "SIZE", "the store file's new size (files only; default: as it is)"}},
       RunResize},
  };
  return commands;
}

const CommandSpec* FindCommand(std::string_view name) {
  for (const CommandSpec& command : Commands()) {
    if (name == command.name) return &command;
  }
  return nullptr;
}

const OptionSpec* FindOption(const std::vector<OptionSpec>& options, std::string_view name) {
  for (const OptionSpec& option : options) {
    if (name == option.name) return &option;
  }
  return nullptr;
}

constexpr const char* kDumpFormatHelp =
    "Dump format (dump and scan write it, load reads it): one pair per line,\n"
    "  KEY<TAB>VALUE\n"
    "after a header line '# nvkv-cli dump v1 encoding=escaped' (or encoding=hex, or\n"
    "encoding=KEYS,VALUES such as hex,escaped). In the escaped encoding printable ASCII\n"
    "stands for itself, except \\\\ (backslash), \\t (tab), \\n (line feed), \\r (carriage\n"
    "return), and \\xHH for every other byte and for a '#' that starts a key. An empty VALUE\n"
    "is an empty field. With --hex (encoding=hex) both fields are lowercase hex; --key-hex\n"
    "and --value-hex make one of them hex. load skips empty lines and lines starting with\n"
    "'#'; a header line sets the encodings, and without one the flags decide. A CR before\n"
    "the LF is ignored.\n";

std::string OptionLines(const std::vector<OptionSpec>& options) {
  std::string out;
  for (const OptionSpec& option : options) {
    std::string head = option.name;
    if (std::strcmp(option.name, "--help") == 0) head = "-h, --help";
    if (option.value_name != nullptr) absl::StrAppend(&head, " ", option.value_name);
    absl::StrAppend(&out, "  ", head, std::string(head.size() < 20 ? 20 - head.size() : 1, ' '),
                    option.help, "\n");
  }
  return out;
}

std::string ToolHelp() {
  std::string out =
      "Usage: nvkv-cli [OPTIONS] COMMAND [ARGS...]\n"
      "\n"
      "Reads and writes an nvkv store: a file (created by format), a block device, or an\n"
      "NVMe namespace through its generic character device (/dev/ngXnY).\n"
      "\n"
      "Commands:\n";
  for (const CommandSpec& command : Commands()) {
    const std::string head = absl::StrCat(command.name, " ", command.operands);
    absl::StrAppend(&out, "  ", head, std::string(head.size() < 16 ? 16 - head.size() : 1, ' '),
                    command.summary, "\n");
  }
  absl::StrAppend(&out, "  help [COMMAND]  this text, or a command's ('COMMAND --help' too)\n",
                  "\nOptions, before or after the command:\n", OptionLines(GlobalOptions()),
                  "\n"
                  "A store opens with the index mode it was formatted with (format --ordered, or\n"
                  "hash); --ordered or --hash opens it with the other one for that command (the\n"
                  "index is rebuilt from the log). Sizes take k, m, g, t suffixes (powers of 1024).\n"
                  "\n",
                  kDumpFormatHelp,
                  "\n"
                  "Exit status: 0 success; 1 key not found (get, del); 2 usage error, or a key\n"
                  "or value the store refuses; 3 other failures; 4 check found problems.\n"
                  "Errors are one line on stderr: 'nvkv-cli: COMMAND: what went wrong'.\n"
                  "Load, dump, check and compact draw a progress bar when stderr is a terminal.\n");
  return out;
}

std::string CommandHelp(const CommandSpec& command) {
  std::string out = absl::StrCat("Usage: nvkv-cli [OPTIONS] ", command.name);
  if (!command.options.empty()) absl::StrAppend(&out, " [", command.name, " OPTIONS]");
  if (*command.operands != '\0') absl::StrAppend(&out, " ", command.operands);
  absl::StrAppend(&out, "\n\n", command.description, "\n");
  if (!command.options.empty()) {
    absl::StrAppend(&out, "\nOptions of ", command.name, ":\n", OptionLines(command.options));
  }
  absl::StrAppend(&out, "\nOptions of every command:\n", OptionLines(GlobalOptions()));
  const std::string_view name = command.name;
  if (name == "dump" || name == "load" || name == "scan") {
    absl::StrAppend(&out, "\n", kDumpFormatHelp);
  }
  return out;
}

// ----- Parsing -----

struct ParsedLine {
  const CommandSpec* command = nullptr;
  bool help = false;
  bool version = false;
  std::string help_topic;  // `help COMMAND`
  std::vector<std::string> operands;
  std::map<std::string, std::string> global_options;
  std::map<std::string, std::string> command_options;
};

// Options go anywhere (global ones before or after the command, a command's own after it);
// "--name=value" or "--name value"; "--" ends them; "-" is an operand (stdin).
Outcome Parse(int argc, char** argv, ParsedLine* parsed) {
  bool options_done = false;
  bool is_help_command = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool is_option = !options_done && arg.size() > 1 && arg[0] == '-';
    if (!is_option) {
      if (parsed->command == nullptr && !is_help_command) {
        if (arg == "help") {
          is_help_command = true;
          parsed->help = true;
          continue;
        }
        parsed->command = FindCommand(arg);
        if (parsed->command == nullptr) {
          return Usage(absl::StrCat("unknown command '", arg, "' (see 'nvkv-cli --help')"));
        }
      } else if (is_help_command && parsed->help_topic.empty()) {
        parsed->help_topic = arg;
      } else {
        parsed->operands.push_back(arg);
      }
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      parsed->help = true;
      continue;
    }
    if (arg.size() < 3 || arg[1] != '-') {
      return Usage(absl::StrCat("unknown option '", arg,
                                "' (an operand that starts with '-' goes after '--')"));
    }
    const size_t equals = arg.find('=');
    const std::string name = arg.substr(0, equals);
    const OptionSpec* spec = FindOption(GlobalOptions(), name);
    bool global = spec != nullptr;
    if (spec == nullptr && parsed->command != nullptr) {
      spec = FindOption(parsed->command->options, name);
    }
    if (spec == nullptr) {
      if (parsed->command == nullptr) {
        return Usage(absl::StrCat("unknown option '", name, "' (a command's options go after it)"));
      }
      return Usage(absl::StrCat("unknown option '", name, "' (see 'nvkv-cli ",
                                parsed->command->name, " --help')"));
    }
    std::string value;
    if (spec->value_name == nullptr) {
      if (equals != std::string::npos) return Usage(absl::StrCat(name, " takes no value"));
    } else if (equals != std::string::npos) {
      value = arg.substr(equals + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return Usage(absl::StrCat(name, " needs a value (", spec->value_name, ")"));
    }
    if (name == "--version") parsed->version = true;
    (global ? parsed->global_options : parsed->command_options)[name] = value;
  }
  return Ok();
}

bool EnvTrue(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return false;
  const std::string lower = absl::AsciiStrToLower(value);
  return lower == "1" || lower == "true" || lower == "yes" || lower == "on";
}

Outcome MakeContext(const ParsedLine& parsed, Context* context) {
  context->command = parsed.command->name;
  context->args = parsed.operands;
  context->options = parsed.command_options;
  const auto& global = parsed.global_options;
  if (auto it = global.find("--db"); it != global.end()) {
    context->db_path = it->second;
  } else if (const char* env = std::getenv("NVKV_DB"); env != nullptr && *env != '\0') {
    context->db_path = env;
  } else {
    context->db_path = "./nvkv.db";
  }
  if (context->db_path.empty()) return Usage("--db: empty path");
  if (global.count("--ordered") != 0 && global.count("--hash") != 0) {
    return Usage("--ordered and --hash ask for two index modes; give one");
  }
  if (global.count("--ordered") != 0 || (global.count("--hash") == 0 && EnvTrue("NVKV_ORDERED"))) {
    context->index_mode = IndexMode::kOrdered;
  } else if (global.count("--hash") != 0) {
    context->index_mode = IndexMode::kHash;
  }
  context->degraded = global.count("--degraded") != 0;
  const bool hex = global.count("--hex") != 0;
  context->encodings.key =
      hex || global.count("--key-hex") != 0 ? Encoding::kHex : Encoding::kEscaped;
  context->encodings.value =
      hex || global.count("--value-hex") != 0 ? Encoding::kHex : Encoding::kEscaped;
  if (auto it = global.find("--shards"); it != global.end()) {
    if (!absl::SimpleAtoi(it->second, &context->shard_count) || context->shard_count == 0) {
      return Usage(absl::StrCat("--shards: '", it->second, "' is not a number from 1 to 64"));
    }
  }
  if (auto it = global.find("--backend"); it != global.end()) {
    const std::string& name = it->second;
    if (name == "auto") {
      context->backend = Backend::kAuto;
    } else if (name == "nvme" || name == "nvme-passthrough") {
      context->backend = Backend::kNvmePassthrough;
    } else if (name == "direct" || name == "direct-file") {
      context->backend = Backend::kDirectFile;
    } else if (name == "sync" || name == "sync-file") {
      context->backend = Backend::kSyncFile;
    } else {
      return Usage(absl::StrCat("--backend: '", name, "' is none of auto, nvme, direct, sync"));
    }
  }
  const CommandSpec& command = *parsed.command;
  if (parsed.operands.size() < command.min_operands ||
      parsed.operands.size() > command.max_operands) {
    const std::string usage = absl::StrCat("nvkv-cli ", command.name,
                                           *command.operands ? " " : "", command.operands);
    return Usage(absl::StrCat(parsed.operands.size() < command.min_operands ? "missing operand"
                                                                            : "too many operands",
                              "; usage: ", usage, " (see 'nvkv-cli ", command.name,
                              " --help')"));
  }
  return Ok();
}

int Finish(const char* command, const Outcome& outcome) {
  if (outcome.exit_code != kExitOk && !outcome.message.empty()) {
    std::fprintf(stderr, "nvkv-cli: %s%s%s\n", command != nullptr ? command : "",
                 command != nullptr ? ": " : "", OneLine(outcome.message).c_str());
  }
  return outcome.exit_code;
}

int Main(int argc, char** argv) {
  ParsedLine parsed;
  const Outcome parse = Parse(argc, argv, &parsed);
  const char* command_name = parsed.command != nullptr ? parsed.command->name : nullptr;
  if (parse.exit_code != kExitOk) return Finish(command_name, parse);
  if (parsed.version) {
    std::printf("nvkv-cli %s\n", NVKV_VERSION_STRING);
    return kExitOk;
  }
  if (parsed.help) {
    const CommandSpec* topic = parsed.command;
    if (!parsed.help_topic.empty()) {
      topic = FindCommand(parsed.help_topic);
      if (topic == nullptr) {
        return Finish("help", Usage(absl::StrCat("unknown command '", parsed.help_topic, "'")));
      }
    }
    const std::string text = topic != nullptr ? CommandHelp(*topic) : ToolHelp();
    std::fputs(text.c_str(), stdout);
    return Finish(command_name, FinishStdout());
  }
  if (parsed.command == nullptr) {
    return Finish(nullptr, Usage("no command given (see 'nvkv-cli --help')"));
  }
  Context context;
  if (Outcome made = MakeContext(parsed, &context); made.exit_code != kExitOk) {
    return Finish(command_name, made);
  }
  return Finish(command_name, parsed.command->run(context));
}

}  // namespace
}  // namespace nvkv::cli

int main(int argc, char** argv) { return nvkv::cli::Main(argc, argv); }
