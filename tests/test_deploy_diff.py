"""`kvplan deploy --diff` reads each changed file's before and after from Ansible's results, in the shapes its
modules report them (tests/test_roles_run.py and tests/test_cluster.py run the real thing)."""

from __future__ import annotations

import pytest

from kvplan.deploy.runner import file_diffs

pytestmark = pytest.mark.unit


def test_a_file_module_diff_becomes_a_unified_diff_headed_by_host_and_path():
    [d] = file_diffs("gpu0", "Files of vllm-0", {"before_header": "/etc/kvplan/vllm-0.command",
                                                 "after_header": "/etc/kvplan/vllm-0.command",
                                                 "before": "serve\n--max-num-seqs 256\n", "after": "serve\n--max-num-seqs 128\n"})
    assert d.unified() == ["--- gpu0:/etc/kvplan/vllm-0.command (now)",
                           "+++ gpu0:/etc/kvplan/vllm-0.command (after the deploy)",
                           "@@ -1,2 +1,2 @@", " serve", "---max-num-seqs 256", "+--max-num-seqs 128"]


def test_every_diff_of_a_list_is_kept_and_a_new_file_has_nothing_before():
    diffs = file_diffs("gpu1", "t", [{"before_header": "/dev/null", "after_header": "/a", "before": "", "after": "x\n"},
                                     {"after_header": "/b", "before": "1\n", "after": "2\n"}])
    assert [d.path for d in diffs] == ["/a", "/b"]
    assert diffs[0].unified()[2:] == ["@@ -0,0 +1 @@", "+x"]


def test_a_state_change_and_a_prepared_text_are_shown_as_they_came():
    [state] = file_diffs("h", "Directory", {"path": "/d", "before": {"state": "absent"}, "after": {"state": "directory"}})
    assert state.unified()[-2:] == ["-{'state': 'absent'}", "+{'state': 'directory'}"]
    [prepared] = file_diffs("h", "Some module", {"prepared": "+ one line\n"})
    assert prepared.after == "+ one line\n" and prepared.path == "Some module"


def test_a_result_without_content_gives_no_diff():
    assert file_diffs("h", "t", {}) == [] and file_diffs("h", "t", ["not a mapping"]) == []
