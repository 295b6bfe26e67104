"""Desktop notifications of a run's end, for a user who is not looking at the window.

`DesktopAlerts` listens to the window's `Notifier` and passes on the notices that
end a run (`Notice.alert`: finished, failed, stopped, interrupted; the window's own
run and a followed or queued one alike), only while the window is not the active
window (the toast is enough while it is) and while the Run menu's switch is on.

`FreedesktopNotifier` says them through org.freedesktop.Notifications over QtDBus.
Its plumbing is odd for a reason: Notify takes `susssasa{sv}i`, and PySide6 turns
every Python int it marshals into an int32 (a uint16 through QDBusArgument), so a
message built in Python carries the wrong replaces_id type and servers refuse it.
A QDBusInterface's methods marshal the C++ types it declares, but it learns them
by introspection, a blocking call to the service. QtDBus caches what it learned per
interface name, so the interface is introspected once from an object of our own
(answered in-process at once), with Notify marked NoReply: the call does not wait
either. The urgency hint goes as an int32 (PySide6 cannot make the byte the spec
asks for): GNOME and KDE honour it, dunst and xfce4-notifyd fall back to normal,
so it is sent for failures only. No session bus (CI, SSH) or no notification
service: nothing is said, and nothing raises.
"""

from __future__ import annotations

import os
from enum import IntEnum
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import Q_ARG, ClassInfo, QMetaObject, QObject, QSettings, Qt
from PySide6.QtDBus import QDBusConnection, QDBusInterface
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QWidget

from mgpu_gui.gui.widgets.notifier import Notice, NoticeKind

DESKTOP_ALERTS_KEY = "notify/desktop"
APP_NAME = "mgpu-gui"
SERVICE = INTERFACE = "org.freedesktop.Notifications"
SERVICE_PATH = "/org/freedesktop/Notifications"
SHAPE_PATH = "/mgpu_gui/notifications_shape"
# The Notify method as the spec declares it, for QtDBus to marshal its arguments by.
NOTIFY_XML = f"""<interface name="{INTERFACE}">
 <method name="Notify">
  <annotation name="org.freedesktop.DBus.Method.NoReply" value="true"/>
  <arg name="app_name" type="s" direction="in"/>
  <arg name="replaces_id" type="u" direction="in"/>
  <arg name="app_icon" type="s" direction="in"/>
  <arg name="summary" type="s" direction="in"/>
  <arg name="body" type="s" direction="in"/>
  <arg name="actions" type="as" direction="in"/>
  <arg name="hints" type="a{{sv}}" direction="in"/>
  <annotation name="org.qtproject.QtDBus.QtTypeName.In6" value="QVariantMap"/>
  <arg name="expire_timeout" type="i" direction="in"/>
  <arg name="id" type="u" direction="out"/>
 </method>
</interface>"""


class Urgency(IntEnum):
    """The spec's urgency levels."""

    LOW = 0
    NORMAL = 1
    CRITICAL = 2


class DesktopNotifier(Protocol):
    def show(self, title: str, text: str, urgency: Urgency) -> None: ...


@ClassInfo({"D-Bus Interface": INTERFACE, "D-Bus Introspection": NOTIFY_XML})
class _NotifyShape(QObject):
    """Answers the introspection of Notify in-process; it is never called."""


def session_bus_reachable() -> bool:
    """Whether a session bus can be found without starting one: with neither an
    address nor the systemd user socket, libdbus would try to autolaunch a bus."""
    if os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        return True
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return bool(runtime) and Path(runtime, "bus").exists()


class FreedesktopNotifier:
    """Notify on the session bus; connects at the first notice, never blocks after it."""

    def __init__(self, parent: QObject) -> None:
        self._parent = parent
        self._interface: QDBusInterface | None = None
        self._connected = False

    def show(self, title: str, text: str, urgency: Urgency) -> None:
        interface = self._connect()
        if interface is None or not interface.isValid():  # no service (now)
            return
        # The desktop entry names our icon too (gui/app.py): the server finds both by it.
        entry = QGuiApplication.desktopFileName() or APP_NAME
        hints = {"desktop-entry": entry}
        if urgency is not Urgency.NORMAL:
            hints["urgency"] = int(urgency)
        QMetaObject.invokeMethod(
            interface, "Notify", Qt.ConnectionType.DirectConnection,
            Q_ARG("QString", APP_NAME), Q_ARG("uint", 0), Q_ARG("QString", entry),
            Q_ARG("QString", title), Q_ARG("QString", text), Q_ARG("QStringList", []),
            Q_ARG("QVariantMap", hints), Q_ARG("int", -1))

    def _connect(self) -> QDBusInterface | None:
        if self._connected:
            return self._interface
        self._connected = True  # one try: a missing bus stays missing for this session
        if not session_bus_reachable():
            return None
        bus = QDBusConnection.sessionBus()
        if not bus.isConnected():
            return None
        shape = _NotifyShape()
        bus.registerObject(SHAPE_PATH, shape, QDBusConnection.RegisterOption.ExportAllContents)
        QDBusInterface(bus.baseService(), SHAPE_PATH, INTERFACE, bus)  # caches Notify's types
        bus.unregisterObject(SHAPE_PATH)
        # Its owner is looked up now (the bus answers at once) and followed after.
        self._interface = QDBusInterface(SERVICE, SERVICE_PATH, INTERFACE, bus, self._parent)
        return self._interface


URGENCY = {NoticeKind.DONE: Urgency.NORMAL, NoticeKind.INFO: Urgency.NORMAL,
           NoticeKind.FAILED: Urgency.CRITICAL}


class DesktopAlerts(QObject):
    """Run ends on the desktop while `window` is not active; see the module's docstring."""

    def __init__(self, window: QWidget, notifier: DesktopNotifier | None = None) -> None:
        super().__init__(window)
        self._window = window
        self.notifier = notifier or FreedesktopNotifier(self)
        self.action = QAction("&Notify on the desktop when a run ends", self)
        self.action.setCheckable(True)
        self.action.setChecked(QSettings().value(DESKTOP_ALERTS_KEY, True, type=bool))
        self.action.setStatusTip("While this window is in the background, a desktop "
                                 "notification says when a run completes, fails or stops")
        self.action.toggled.connect(lambda on: QSettings().setValue(DESKTOP_ALERTS_KEY, on))

    def hear(self, notice: Notice) -> None:
        if notice.alert and self.action.isChecked() and not self._window.isActiveWindow():
            self.notifier.show(notice.title, notice.text, URGENCY[notice.kind])
