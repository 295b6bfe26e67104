"""Run ▸ Train across machines…: start this machine as the chief of a multi-worker run.

The user lists every worker's host:port (this machine first); the dialog checks
the list as it is typed, saves the run's shared settings next to the runs, and
shows the command each other machine runs to join. The run itself starts from
the main window (`RunController.start_cluster`).
"""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.runs.checkpoints import write_text_atomically
from mgpu_gui.core.runs.cluster import (
    DEFAULT_PEER_TIMEOUT_S,
    ClusterError,
    ClusterSpec,
    resumable_run,
    shared_config,
    worker_commands,
)
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen

CONFIG_NAME = "cluster-config.json"  # next to the run folders: what the other workers read
GUI_START_TIMEOUT_S = 600.0  # time to start the others by hand after pressing Start
SECURITY = ("TensorFlow's servers listen on every network interface without "
            "authentication, and NCCL opens sockets of its own (set NCCL_SOCKET_IFNAME): "
            "use a trusted lab network behind a firewall only.")


class ClusterDialog(QDialog):
    """Cluster addresses and timeouts; the commands for the other machines."""

    def __init__(self, config: RunConfig, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Train across machines")
        self.config = config
        self.config_file = config.output_path.absolute() / CONFIG_NAME
        self.spec: ClusterSpec | None = None
        self.resume: RunDir | None = None
        self._resume_for: tuple[str, ...] | None = None  # the workers `resume` was looked up for

        self.workers = QLineEdit(self)
        self.workers.setAccessibleName("Cluster workers")
        self.workers.setPlaceholderText("10.0.0.1:2222, 10.0.0.2:2222")
        self.workers.setToolTip("Every worker's host:port, comma separated, this machine "
                                "(the chief) first; the same list on every machine")
        self.start_timeout = _seconds(GUI_START_TIMEOUT_S, "Start timeout",
                                      "How long the chief waits for every worker to join")
        self.peer_timeout = _seconds(DEFAULT_PEER_TIMEOUT_S, "Peer timeout",
                                     "A worker silent this long counts as lost; the others "
                                     "stop and say which")
        self.problem = QLabel(self, wordWrap=True)
        self.problem.setAccessibleName("Cluster problem")
        self.problem.setStyleSheet("color: #b3261e;")
        self.resume_box = QCheckBox(self)
        self.resume_box.setAccessibleName("Resume the unfinished cluster run")
        self.resume_box.setChecked(True)
        self.resume_box.hide()
        self.commands = QPlainTextEdit(self)
        self.commands.setReadOnly(True)
        self.commands.setAccessibleName("Commands for the other workers")
        self.commands.setMinimumHeight(90)
        copy = QPushButton("Copy commands", self)
        copy.setAccessibleName("Copy commands")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(
            self.commands.toPlainText()))
        security = QLabel(SECURITY, self, wordWrap=True)
        security.setAccessibleName("Security note")

        form = QFormLayout()
        form.addRow("Workers:", self.workers)
        form.addRow("Start timeout:", self.start_timeout)
        form.addRow("Peer timeout:", self.peer_timeout)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel, self)
        self.start_button = self.buttons.addButton("Start chief",
                                                   QDialogButtonBox.ButtonRole.AcceptRole)
        self.start_button.setAccessibleName("Start chief")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.problem)
        layout.addWidget(self.resume_box)
        layout.addWidget(QLabel(f"On each other machine, with the model and data at the same "
                                f"paths (their content is compared) and {CONFIG_NAME} copied "
                                f"there, run:", self, wordWrap=True))
        layout.addWidget(self.commands)
        layout.addWidget(copy)
        layout.addWidget(security)
        layout.addWidget(self.buttons)
        for signal in (self.workers.textChanged, self.start_timeout.valueChanged,
                       self.peer_timeout.valueChanged):
            signal.connect(self._check)
        fit_to_screen(self, QSize(720, 420))
        self._check()

    def _check(self) -> None:
        try:
            self.spec = ClusterSpec.parse(self.workers.text(), 0,
                                          start_timeout_s=self.start_timeout.value(),
                                          peer_timeout_s=self.peer_timeout.value())
        except ClusterError as error:
            self.spec = None
            self.problem.setText(str(error) if self.workers.text().strip() else "")
            self.commands.setPlainText("")
        else:
            self.problem.setText("")
            self.commands.setPlainText("\n".join(worker_commands(self.spec, self.config_file)))
        workers = self.spec.workers if self.spec is not None else None
        if workers != self._resume_for:  # not again for a timeout or a half-typed address
            self._resume_for = workers
            self.resume = resumable_run(self.config, self.spec) if self.spec is not None else None
        if self.resume is not None:
            self.resume_box.setText(f"Resume the unfinished run of this cluster in "
                                    f"{self.resume.path.name} (after epoch "
                                    f"{self.resume.backup_epoch()})")
        self.resume_box.setVisible(self.resume is not None)
        self.start_button.setEnabled(self.spec is not None)

    def accept(self) -> None:
        """Save the settings the other workers read, then close."""
        if self.spec is None:
            return
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(self.config_file, shared_config(self.config).to_json())
        if not self.resume_box.isChecked():
            self.resume = None
        super().accept()


def _seconds(value: float, name: str, tip: str) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(1, 24 * 3600)
    box.setDecimals(0)
    box.setSuffix(" s")
    box.setValue(value)
    box.setAccessibleName(name)
    box.setToolTip(tip)
    return box
