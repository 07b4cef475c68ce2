// A live line chart of message rates on a <canvas>: the last `capacity` samples of a few
// series, the y axis scaled to the largest value shown. Drawn by hand: no chart library.

export class RateChart {
  constructor(canvas, series, capacity = 60) {
    this.canvas = canvas;
    this.series = series; // [{key, label, color}]
    this.capacity = capacity;
    this.points = []; // one {key: value} per sample
  }

  push(sample) {
    this.points.push(sample);
    if (this.points.length > this.capacity) this.points.shift();
    this.draw();
  }

  draw() {
    const { canvas } = this;
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 600;
    const height = canvas.clientHeight || 220;
    canvas.width = width * ratio;
    canvas.height = height * ratio;
    const g = canvas.getContext("2d");
    g.scale(ratio, ratio);
    g.clearRect(0, 0, width, height);
    const left = 48, top = 10, bottom = height - 20, right = width - 10;
    const max = Math.max(1, ...this.points.flatMap((p) => this.series.map((s) => p[s.key] || 0)));
    // Axes and three grid lines, labelled in messages per second.
    g.strokeStyle = "#d9dde5";
    g.fillStyle = "#6b7280";
    g.font = "11px system-ui, sans-serif";
    for (let i = 0; i <= 2; i += 1) {
      const y = bottom - ((bottom - top) * i) / 2;
      g.beginPath(); g.moveTo(left, y); g.lineTo(right, y); g.stroke();
      g.fillText(`${((max * i) / 2).toFixed(max < 10 ? 1 : 0)}/s`, 4, y + 4);
    }
    const step = (right - left) / Math.max(1, this.capacity - 1);
    const x0 = right - step * (this.points.length - 1);
    for (const { key, color } of this.series) {
      g.strokeStyle = color;
      g.lineWidth = 2;
      g.beginPath();
      this.points.forEach((p, i) => {
        const y = bottom - ((bottom - top) * (p[key] || 0)) / max;
        if (i === 0) g.moveTo(x0 + i * step, y); else g.lineTo(x0 + i * step, y);
      });
      g.stroke();
    }
  }
}
