"""The main window's actions, its menus and its toolbar.

A mixin of `MainWindow`, kept apart so the window module holds the panels and the run:
each action calls a slot of the window (or of a mixin: ToolDialogs, SweepActions,
ExportActions) and the window enables them as its state changes (`_update_actions`).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QToolBar


class WindowActions:
    def _build_actions(self) -> None:
        def action(text, shortcut, slot, tip):
            act = QAction(text, self)
            act.setShortcut(QKeySequence(shortcut))
            act.setToolTip(f"{tip} ({QKeySequence(shortcut).toString()})")
            act.setStatusTip(tip)
            act.triggered.connect(slot)
            return act

        self.open_action = action("&Open model…", QKeySequence.StandardKey.Open,
                                  self.run_setup.model_browse.click, "Choose a model file")
        self.train_action = action("&Train", "Ctrl+Return", self.start_training,
                                   "Start training with these settings")
        self.queue_action = action("Add to &queue", "Ctrl+Shift+Return", self.add_to_queue,
                                   "Queue these settings: the run starts when its devices are "
                                   "free, even with this window closed")
        self.stop_action = action("&Stop", "Ctrl+.", self.stop_training,
                                  "Stop at the next batch; the run stays resumable")
        self.export_action = action("&Export model…", "Ctrl+E", self.export_model,
                                    "Save the trained single-device model")
        self.quit_action = action("&Quit", QKeySequence.StandardKey.Quit, self.close, "Quit")
        self.scaling_action = action(
            "Scaling &test…", "Ctrl+Shift+T", self.show_scaling_test,
            "Time this model on 1, 2, … of the chosen devices: samples/s, speed-up, efficiency")
        self.cluster_action = action(
            "Train across &machines…", "Ctrl+Shift+M", self.train_across_machines,
            "Start this machine as the chief of a multi-worker run; shows the command for "
            "the other machines")
        self.batch_action = action(
            "Find &batch size…", "Ctrl+Shift+B", self.show_batch_finder,
            "Try growing batches per GPU in short-lived processes: the largest that fits")
        self.evaluate_action = action(
            "&Evaluate the model file…", "Ctrl+Shift+E", self.evaluate_model_file,
            "The trained model chosen in Model on the data chosen in Data: per-class figures "
            "and the confusion matrix")
        self.doctor_action = QAction("&Check my setup…", self)
        self.doctor_action.setStatusTip("Compare what the NVIDIA driver, CUDA, TensorFlow and "
                                        "NCCL say, and what to fix when they disagree")
        self.doctor_action.triggered.connect(self.check_setup)
        self.about_action = QAction("&About mgpu-gui", self)
        self.about_action.setMenuRole(QAction.MenuRole.AboutRole)
        self.about_action.triggered.connect(self.show_about)

        bar = self.menuBar()
        bar.setAccessibleName("Main menu")
        file_menu = bar.addMenu("&File")
        for act in (self.open_action, self.export_action):
            file_menu.addAction(act)
        file_menu.addSeparator()
        file_menu.addAction(self.quit_action)
        run_menu = bar.addMenu("&Run")
        run_menu.addAction(self.train_action)
        run_menu.addAction(self.queue_action)
        run_menu.addAction(self.stop_action)
        run_menu.addAction(self.cluster_action)
        run_menu.addAction(self.make_sweep_action())
        run_menu.addSeparator()
        run_menu.addAction(self.scaling_action)
        run_menu.addAction(self.batch_action)
        run_menu.addAction(self.evaluate_action)
        run_menu.addAction(self.make_evaluate_finished_action())
        run_menu.addAction(self.desktop_alerts.action)
        help_menu = bar.addMenu("&Help")
        help_menu.addAction(self.doctor_action)
        help_menu.addAction(self.about_action)

        toolbar = QToolBar("Run", self)
        toolbar.setObjectName("runToolbar")
        toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        toolbar.addAction(self.train_action)
        toolbar.addAction(self.queue_action)
        toolbar.addAction(self.stop_action)
        toolbar.addSeparator()
        toolbar.addAction(self.export_action)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, toolbar)
