package dev.rbridge.cli;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandleProxies;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;

/**
 * The process signals a server command handles itself (SIGTERM in {@link GracefulStop}, SIGHUP in serve), through the
 * JDK's {@code sun.misc.Signal}: no public API handles a signal. That class lives in the {@code jdk.unsupported}
 * module, which exports it for this use (JEP 260). It is reached here by reflection, and nowhere by name, because
 * javac warns of every use of it by name ("internal proprietary API"), a warning that no {@code -Xlint} key and no
 * {@code @SuppressWarnings} silences and that would fail this module's {@code -Werror} build. A runtime without it
 * (one linked without {@code jdk.unsupported}) fails the first call with an IllegalStateException that says so.
 */
final class Signals {
    private Signals() {}

    /**
     * From now on {@code action} runs on the JVM's signal thread each time signal {@code name} ({@code TERM},
     * {@code HUP}) arrives; it should hand long work to a thread of its own.
     *
     * @return whether the process ignored the signal until now (started under {@code nohup}, say): the JVM keeps
     * TERM and HUP ignored then, and {@code action} never runs for them
     * @throws IllegalArgumentException when the JVM keeps the signal for itself or knows no signal of that name
     */
    static boolean handle(String name, Runnable action) {
        SunMisc jdk = SunMisc.lookUp();
        Object handler = MethodHandleProxies.asInterfaceInstance(jdk.handlerType(),
                MethodHandles.dropArguments(jdk.run().bindTo(action), 0, jdk.newSignal().type().returnType()));
        try {
            return jdk.handle().invoke(jdk.newSignal().invoke(name), handler) == jdk.ignored();
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable e) {
            throw new IllegalStateException("cannot handle SIG" + name + ": " + e, e);
        }
    }

    /**
     * What {@link #handle} calls, looked up at each call (a process handles two signals, once each).
     *
     * @param handlerType {@code sun.misc.SignalHandler}, the interface a handler implements
     * @param newSignal   {@code new Signal(String)}
     * @param handle      {@code Signal.handle(Signal, SignalHandler)}: installs a handler, returns the one before
     * @param ignored     {@code SignalHandler.SIG_IGN}, the handler of an ignored signal
     * @param run         {@link Runnable#run}, what the handler calls
     */
    private record SunMisc(Class<?> handlerType, MethodHandle newSignal, MethodHandle handle, Object ignored,
            MethodHandle run) {
        static SunMisc lookUp() {
            MethodHandles.Lookup lookup = MethodHandles.publicLookup();
            try {
                Class<?> signal = Class.forName("sun.misc.Signal");
                Class<?> handler = Class.forName("sun.misc.SignalHandler");
                return new SunMisc(handler,
                        lookup.findConstructor(signal, MethodType.methodType(void.class, String.class)),
                        lookup.findStatic(signal, "handle", MethodType.methodType(handler, signal, handler)),
                        handler.getField("SIG_IGN").get(null),
                        lookup.findVirtual(Runnable.class, "run", MethodType.methodType(void.class)));
            } catch (ReflectiveOperationException | LinkageError e) {
                throw new IllegalStateException("this Java runtime cannot handle signals: sun.misc.Signal, from the"
                        + " jdk.unsupported module, is missing (" + e + "); rbridge needs it for SIGTERM and SIGHUP",
                        e);
            }
        }
    }
}
