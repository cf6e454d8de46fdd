package io.lakesink.serve;

import java.nio.charset.StandardCharsets;

/**
 * What a client sent in its SASL PLAIN login, undone from the server's decoding.
 *
 * <p>The Thrift server (Spark 4.1's {@code org.apache.hive.service.auth.PlainSaslServer})
 * turns each byte of the login into one char ({@code (char) b}, sign-extended), so a UTF-8
 * password such as {@code pässwort} reaches a login check as other characters, and would
 * never match its hash. The low byte of each char is the byte sent.
 */
final class SaslPlain {

  private SaslPlain() {}

  /** The bytes the client sent: its UTF-8 password. */
  static byte[] bytes(String received) {
    if (received == null) {
      return new byte[0];
    }
    byte[] sent = new byte[received.length()];
    for (int i = 0; i < sent.length; i++) {
      char c = received.charAt(i);
      if (c >= 0x80 && c < 0xFF80) {
        // Not made from bytes one by one: a properly decoded string.
        return received.getBytes(StandardCharsets.UTF_8);
      }
      sent[i] = (byte) c;
    }
    return sent;
  }

  /** The text the client sent, decoded as UTF-8: its user name. */
  static String text(String received) {
    return new String(bytes(received), StandardCharsets.UTF_8);
  }
}
